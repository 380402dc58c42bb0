import { createHash } from 'node:crypto'
import { readdirSync } from 'node:fs'
import { describe, expect, it } from 'vitest'

/** The schema name every migration's text is hashed for. */
export const FROZEN_SCHEMA = 'outbox_frozen'

/** A migration as a package's `src/migrations/index.ts` lists it. */
export interface FrozenMigration {
  readonly name: string
  readonly sql: (schema: string) => string
}

const sha256 = (text: string) => createHash('sha256').update(text).digest('hex')

/**
 * The tests that freeze a package's migrations: each merged migration keeps the text it had (sha256 of its SQL for
 * {@link FROZEN_SCHEMA}), none escapes the list, and the index is exactly the files of `directory`, in order,
 * numbered 0001 up without gaps. A database keeps what a migration did when it ran, so editing a merged migration
 * would leave databases migrated before and after the edit different: a change is a new migration.
 *
 * @example
 * ```ts
 * describeFrozenMigrations('consumer migrations', consumerMigrations, { '0001_x': '…' }, new URL('../src/migrations/', import.meta.url))
 * ```
 */
export function describeFrozenMigrations(
  title: string,
  migrations: readonly FrozenMigration[],
  frozen: Readonly<Record<string, string>>,
  directory: URL,
): void {
  describe(title, () => {
    it.each(Object.entries(frozen))('%s keeps its merged text', (name, hash) => {
      const migration = migrations.find((candidate) => candidate.name === name)
      expect(
        migration,
        `migration ${name} left the index: merged migrations are never removed or renamed`,
      ).toBeDefined()
      expect(
        sha256(migration!.sql(FROZEN_SCHEMA)),
        `migrations are frozen once merged: add a new migration instead of editing ${name.slice(0, 4)}`,
      ).toBe(hash)
    })

    it('each has its hash, so none escapes the freeze', () => {
      for (const { name, sql } of migrations) {
        expect(
          frozen[name],
          `add '${name}': '${sha256(sql(FROZEN_SCHEMA))}' to the frozen list`,
        ).toBeDefined()
      }
    })

    it('are indexed in order, numbered 0001 up without gaps, one file each and every file indexed', () => {
      const files = readdirSync(directory)
        .filter((file) => file !== 'index.ts')
        .sort()
      const names = migrations.map((migration) => migration.name)
      // A migration's name is its file's name: what the migrator records can always be traced to its file.
      expect(names).toEqual(files.map((file) => file.replace(/\.ts$/, '').replaceAll('-', '_')))
      expect(names.map((name) => name.slice(0, 5))).toEqual(
        names.map((_, index) => `${String(index + 1).padStart(4, '0')}_`),
      )
    })
  })
}
