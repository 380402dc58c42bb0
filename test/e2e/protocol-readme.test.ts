// The protocol README's sending example, run as a reader runs it: its code (examples/orders/snippets/protocol-send.ts,
// kept equal to the README by the snippet check) in a process of its own, with the variables it reads, against a
// real @outbox/consumer on a real database. The request it builds must be one the consumer accepts and applies.
// And its Install section must be a command that can work while nothing is published.
import { execFile } from 'node:child_process'
import { randomBytes } from 'node:crypto'
import { readFileSync } from 'node:fs'
import { createServer } from 'node:http'
import type { AddressInfo } from 'node:net'
import { join, resolve } from 'node:path'
import { fileURLToPath } from 'node:url'
import { promisify } from 'node:util'
import { createConsumer, type Refusal } from '@outbox/consumer'
import { silentLogger } from '@outbox/producer'
import { useTestDatabase } from '@outbox/test-harness'
import { sql } from 'kysely'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'

const run = promisify(execFile)
const ROOT = resolve(fileURLToPath(new URL('../..', import.meta.url)))
const SNIPPET = join(ROOT, 'examples/orders/snippets/protocol-send.ts')
const README = join(ROOT, 'packages/protocol/README.md')

const t = useTestDatabase()
const oldSecret = `whsec_${randomBytes(32).toString('base64')}`
const newSecret = `whsec_${randomBytes(32).toString('base64')}`
const refusals: Refusal[] = []
let endpoint: string
let close: () => Promise<void>

beforeAll(async () => {
  await sql`CREATE TABLE received (event_id uuid, type text, aggregate_id text, sequence integer, data jsonb)`.execute(
    t.db,
  )
  // The consumer knows only the old secret, as a subscriber does while its sender rotates.
  const consumer = createConsumer({
    db: t.db,
    secret: oldSecret,
    logger: silentLogger,
    onError: (refusal) => refusals.push(refusal),
  })
  const server = createServer(
    consumer.node(async (event, trx) => {
      await trx
        .insertInto('received')
        .values({
          event_id: event.eventId,
          type: event.type,
          aggregate_id: event.aggregateId,
          sequence: event.sequence,
          data: JSON.stringify(event.data),
        })
        .execute()
    }),
  )
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  endpoint = `http://127.0.0.1:${(server.address() as AddressInfo).port}/hooks`
  close = () =>
    new Promise<void>((resolve) => {
      server.closeAllConnections()
      server.close(() => resolve())
    })
})

afterAll(async () => {
  await close?.()
})

/**
 * Runs the snippet as its header says (`node --import tsx`, the settings in the environment) and reads the line it
 * prints: the status, then the answer's body.
 */
async function sendAsTheReadmeShows(secret: string): Promise<{ status: number; body: unknown }> {
  const { stdout } = await run(
    process.execPath,
    ['--import', 'tsx', '--conditions=@outbox/source', SNIPPET],
    { cwd: ROOT, env: { ...process.env, OUTBOX_ENDPOINT: endpoint, OUTBOX_SECRET: secret }, timeout: 60_000 },
  )
  const [, status = '', body = ''] = /^(\d{3}) (.*)$/s.exec(stdout.trim()) ?? []
  return { status: Number(status), body: JSON.parse(body) }
}

describe("the protocol README's sending example", () => {
  it('sends a request the consumer accepts and applies: every header it needs, signed', async () => {
    expect(await sendAsTheReadmeShows(oldSecret)).toMatchObject({ status: 200, body: { status: 'applied' } })
    expect(refusals).toEqual([])
    const rows = await t.db.selectFrom('received').selectAll().execute()
    expect(rows).toMatchObject([
      { type: 'order.created', aggregate_id: '42', sequence: 1, data: { total: 3 } },
    ])
  })

  it('signs with every secret of a rotation list, so a receiver still on the old one accepts it', async () => {
    // A new event id with sequence 1 of order/42 again: authentic, and older than what the consumer applied.
    expect(await sendAsTheReadmeShows(`${newSecret},${oldSecret}`)).toMatchObject({
      status: 200,
      body: { status: 'stale_ignored' },
    })
    expect(refusals).toEqual([])
  })
})

describe("the protocol README's Install section", () => {
  const install = /^## Install\n([\s\S]*?)\n## /m.exec(readFileSync(README, 'utf8'))?.[1] ?? ''
  const { version } = JSON.parse(readFileSync(join(ROOT, 'packages/protocol/package.json'), 'utf8')) as {
    version: string
  }

  it('installs the packed tarball that `pnpm pack` writes, not a registry name nothing is published under', () => {
    const commands = [...install.matchAll(/```sh\n([\s\S]*?)```/g)].map((block) => block[1]!.trim())
    expect(commands).toEqual([`npm install ./vendor/outbox/outbox-protocol-${version}.tgz`])
    // How to make that tarball: the root README's Install, which must exist under that anchor.
    expect(install).toContain('](../../README.md#install)')
    expect(readFileSync(join(ROOT, 'README.md'), 'utf8')).toMatch(/^### Install$/m)
  })
})
