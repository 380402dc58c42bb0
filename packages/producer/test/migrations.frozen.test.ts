import { createHash } from 'node:crypto'
import { readdirSync } from 'node:fs'
import { describe, expect, it } from 'vitest'
import { producerMigrations } from '../src/migrations/index.js'

/** The schema name every migration's text is hashed for. */
const FROZEN_SCHEMA = 'outbox_frozen'

/**
 * sha256 of each merged migration's text for {@link FROZEN_SCHEMA}. A database keeps what a migration did when it
 * ran, so editing a merged migration would leave databases migrated before and after the edit different: a
 * change is a new migration, with its own line here.
 */
const FROZEN: Readonly<Record<string, string>> = {
  '0001_outbox': 'fe4865beed5282315503afe09dd41bd96c36ee6511ea96f8cd2ab20c9482d2ee',
  '0002_lane_claim_token': '1e6793cbce5109a63697ceabeb7b26caaf0f6217e4aa3ced17b067e23c9c5d41',
  '0003_enqueue_function': '48be68e316338478040741ee90bf4a7fd2fcf5630c47eaaa669c98351e6e963c',
  '0004_claim_function': '7f066d5bf9c5a160edc0e4dfeafca2d0577ddde009a5783612874497a0093820',
  '0005_enqueue_inline': 'a6b2bc7ffb19f0f4454e9240e3b1c3897c59e2fc77d24f8e8eb395b2a62073c8',
  '0006_claim_hashed_busy': 'ed9f8f8ec2877e5a51faa14ea1dc3ac380e3a756bb33d2534a267ec215d329a3',
  '0007_liveness': '0f30b65a2bfc98097677db6bc16176564aba56b665050f9dc0f643105f4af078',
}

const sha256 = (text: string) => createHash('sha256').update(text).digest('hex')

describe('producer migrations', () => {
  it.each(Object.entries(FROZEN))('%s keeps its merged text', (name, hash) => {
    const migration = producerMigrations.find((candidate) => candidate.name === name)
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
    for (const { name, sql } of producerMigrations) {
      expect(FROZEN[name], `add '${name}': '${sha256(sql(FROZEN_SCHEMA))}' to FROZEN`).toBeDefined()
    }
  })

  it('are indexed in order, numbered 0001 up without gaps, one file each and every file indexed', () => {
    const files = readdirSync(new URL('../src/migrations/', import.meta.url))
      .filter((file) => file !== 'index.ts')
      .sort()
    const names = producerMigrations.map((migration) => migration.name)
    // A migration's name is its file's name: what the migrator records can always be traced to its file.
    expect(names).toEqual(files.map((file) => file.replace(/\.ts$/, '').replaceAll('-', '_')))
    expect(names.map((name) => name.slice(0, 5))).toEqual(
      names.map((_, index) => `${String(index + 1).padStart(4, '0')}_`),
    )
  })
})
