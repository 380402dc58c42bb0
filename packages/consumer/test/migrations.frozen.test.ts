import { createHash } from 'node:crypto'
import { readdirSync } from 'node:fs'
import { describe, expect, it } from 'vitest'
import { consumerMigrations } from '../src/migrations/index.js'

/** The schema name every migration's text is hashed for. */
const FROZEN_SCHEMA = 'outbox_frozen'

/**
 * sha256 of each merged migration's text for {@link FROZEN_SCHEMA}. A database keeps what a migration did when it
 * ran, so editing a merged migration would leave databases migrated before and after the edit different: a
 * change is a new migration, with its own line here.
 */
const FROZEN: Readonly<Record<string, string>> = {
  '0001_processed_events_and_cursors': '94fd4369385b87f4acc591aa70a444faddee3ea20e7f641b7b076800724582ac',
  '0002_record_event_function': '21617bdba378ee683640fd25d9bd9a6d819ceedf177911288e6d71bc1a83dc7c',
}

const sha256 = (text: string) => createHash('sha256').update(text).digest('hex')

describe('consumer migrations', () => {
  it.each(Object.entries(FROZEN))('%s keeps its merged text', (name, hash) => {
    const migration = consumerMigrations.find((candidate) => candidate.name === name)
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
    for (const { name, sql } of consumerMigrations) {
      expect(FROZEN[name], `add '${name}': '${sha256(sql(FROZEN_SCHEMA))}' to FROZEN`).toBeDefined()
    }
  })

  it('are indexed in order, numbered 0001 up without gaps, one file each and every file indexed', () => {
    const files = readdirSync(new URL('../src/migrations/', import.meta.url))
      .filter((file) => file !== 'index.ts')
      .sort()
    const names = consumerMigrations.map((migration) => migration.name)
    // A migration's name is its file's name: what the migrator records can always be traced to its file.
    expect(names).toEqual(files.map((file) => file.replace(/\.ts$/, '').replaceAll('-', '_')))
    expect(names.map((name) => name.slice(0, 5))).toEqual(
      names.map((_, index) => `${String(index + 1).padStart(4, '0')}_`),
    )
  })
})
