import { randomUUID } from 'node:crypto'
import { useTestDatabase } from '@outbox/test-harness'
import { sql } from 'kysely'
import { beforeAll, describe, expect, it } from 'vitest'
import { listDeadLetters, migrate } from '../src/index.js'
import { buildCli, cliEnv, expectFailure, REFUSED_URL, runCli } from './cli-process.js'
import { seedEvents } from './support.js'

const t = useTestDatabase()

interface Row {
  event_id: string
  aggregate_id: string
  sequence: string
  status: string
  attempts: number
}

async function rows(schema: string): Promise<Row[]> {
  return await t.db
    .withSchema(schema)
    .selectFrom('outbox')
    .select(['event_id', 'aggregate_id', 'sequence', 'status', 'attempts'])
    .orderBy('id')
    .execute()
}

interface Seeded {
  readonly dead: Row[]
  readonly pending: Row
  readonly sentRow: Row
}

/** d1..d3 dead-lettered one minute apart (d1 oldest) after 8 attempts; one pending and one sent event. */
async function seedDeadLetters(schema: string): Promise<Seeded> {
  await migrate(t.db, { schema })
  await seedEvents(t.db, ['d1', 'd2', 'd3', 'live', 'done'], 1, { schema })
  const outbox = sql.id(schema, 'outbox')
  await sql`
    UPDATE ${outbox} SET status = 'dead', attempts = 8, last_status = 500,
      last_error = 'HTTP 500: ' || repeat('upstream exploded ', 10), last_attempt_at = now(),
      dead_at = now() - (4 - substr(aggregate_id, 2)::int) * interval '1 minute'
    WHERE aggregate_id LIKE 'd_'`.execute(t.db)
  await sql`UPDATE ${outbox} SET status = 'sent', sent_at = now() WHERE aggregate_id = 'done'`.execute(t.db)
  const all = await rows(schema)
  return {
    dead: ['d1', 'd2', 'd3'].map((id) => all.find((row) => row.aggregate_id === id)!),
    pending: all.find((row) => row.aggregate_id === 'live')!,
    sentRow: all.find((row) => row.aggregate_id === 'done')!,
  }
}

// Listing reads the public schema; redriving changes rows, so it works on a schema of its own and the tests can
// run concurrently.
let dead: Row[] = []
let redriving: Seeded

beforeAll(async () => {
  buildCli()
  ;({ dead } = await seedDeadLetters('public'))
  redriving = await seedDeadLetters('redriving')
}, 120_000)

describe.concurrent('outbox dead-letters', () => {
  it('list --json prints every dead letter, oldest first, as the rows say', async () => {
    const result = await runCli(['dead-letters', 'list', '--json'], cliEnv({ DATABASE_URL: t.url }))
    expect(result, result.stderr).toMatchObject({ code: 0, stderr: '' })
    const printed = JSON.parse(result.stdout)
    expect(printed.map((one: { eventId: string }) => one.eventId)).toEqual(dead.map((row) => row.event_id))
    expect(printed[0]).toMatchObject({
      aggregateType: 'order',
      aggregateId: 'd1',
      sequence: 1,
      eventType: 'order.updated',
      attempts: 8,
      lastStatus: 500,
    })
    expect(printed[0].lastError).toMatch(/^HTTP 500: upstream exploded/)
    // The same documents the library returns, dates as ISO strings.
    expect(printed).toEqual(JSON.parse(JSON.stringify(await listDeadLetters(t.db))))
  })

  it('list prints a table, and pages with --limit/--after (the next page is named on stderr)', async () => {
    const env = cliEnv({ DATABASE_URL: t.url })
    const table = await runCli(['dead-letters', 'list'], env)
    expect(table, table.stderr).toMatchObject({ code: 0, stderr: '' })
    const lines = table.stdout.trimEnd().split('\n')
    expect(lines[0]).toMatch(/^DEAD AT\s+EVENT ID\s+AGGREGATE\s+SEQ\s+TYPE\s+ATTEMPTS\s+LAST\s+LAST ERROR$/)
    expect(lines).toHaveLength(4)
    dead.forEach((row, index) => {
      expect(lines[index + 1]).toMatch(
        new RegExp(
          `^\\S+Z\\s+${row.event_id}\\s+order:${row.aggregate_id}\\s+1\\s+order\\.updated\\s+8\\s+500\\s+HTTP 500: upstream`,
        ),
      )
      // Long errors are cut to keep one row per line.
      expect(lines[index + 1]).toMatch(/…$/)
    })

    const first = await runCli(['dead-letters', 'list', '--limit', '2', '--json'], env)
    expect(first.code).toBe(0)
    const page = JSON.parse(first.stdout)
    expect(page.map((one: { eventId: string }) => one.eventId)).toEqual([
      dead[0]!.event_id,
      dead[1]!.event_id,
    ])
    expect(first.stderr).toBe(
      `more may follow: outbox dead-letters list --limit 2 --after ${page[1].cursor}\n`,
    )
    const next = await runCli(['dead-letters', 'list', '--limit', '2', '--after', page[1].cursor], env)
    expect(next, next.stderr).toMatchObject({ code: 0, stderr: '' })
    expect(next.stdout).toContain(dead[2]!.event_id)
    expect(next.stdout).not.toContain(dead[1]!.event_id)
  })

  it('redrive revives the given dead letters and names the ids that were not; --all revives the rest', async () => {
    const { dead, pending, sentRow } = redriving
    const env = cliEnv({ DATABASE_URL: t.url, OUTBOX_SCHEMA: 'redriving' })
    const unknown = randomUUID()
    const result = await runCli(
      [
        'dead-letters',
        'redrive',
        dead[0]!.event_id,
        pending.event_id,
        unknown,
        sentRow.event_id.toUpperCase(),
      ],
      env,
    )
    expect(result, result.stderr).toMatchObject({ code: 0, stderr: '' })
    expect(result.stdout).toBe(
      [
        'redriven 1 (pending again, same event id and sequence, attempts reset):',
        `  ${dead[0]!.event_id}`,
        'not dead letters, left unchanged (unknown, pending or already sent): 3',
        `  ${pending.event_id}`,
        `  ${unknown}`,
        `  ${sentRow.event_id}`,
        '',
      ].join('\n'),
    )
    const after = await rows('redriving')
    expect(after.find((row) => row.event_id === dead[0]!.event_id)).toMatchObject({
      status: 'pending',
      attempts: 0,
      sequence: '1',
    })
    expect(after.find((row) => row.event_id === sentRow.event_id)?.status).toBe('sent')
    expect(after.filter((row) => row.status === 'dead')).toHaveLength(2)

    const all = await runCli(['dead-letters', 'redrive', '--all', '--json'], env)
    expect(all, all.stderr).toMatchObject({ code: 0, stderr: '' })
    const printed = JSON.parse(all.stdout)
    expect([...printed.redriven].sort()).toEqual([dead[1]!.event_id, dead[2]!.event_id].sort())
    expect(printed.notDead).toEqual([])
    expect((await rows('redriving')).filter((row) => row.status === 'dead')).toEqual([])
    const again = await runCli(['dead-letters', 'redrive', '--all'], env)
    expect(again).toMatchObject({ code: 0, stdout: 'nothing to redrive: there are no dead letters\n' })
    const empty = await runCli(['dead-letters', 'list'], env)
    expect(empty).toMatchObject({ code: 0, stdout: 'no dead letters\n', stderr: '' })
  })

  it('answers usage mistakes with exit 2, before connecting', async () => {
    const env = cliEnv({ DATABASE_URL: REFUSED_URL })
    const results = await Promise.all(
      [
        ['dead-letters'],
        ['dead-letters', 'show'],
        ['dead-letters', 'redrive'],
        ['dead-letters', 'redrive', '--all', randomUUID()],
        ['dead-letters', 'list', '--limit', '0'],
        ['dead-letters', 'list', 'extra'],
      ].map((args) => runCli(args, env)),
    )
    expectFailure(results[0]!, 2, /missing subcommand: outbox dead-letters list\|redrive/)
    expectFailure(results[1]!, 2, /unknown subcommand "show"/)
    expectFailure(results[2]!, 2, /give the event ids to redrive, or --all/)
    expectFailure(results[3]!, 2, /give event ids or --all, not both/)
    expectFailure(results[4]!, 2, /--limit must be an integer from 1 to 10000, got "0"/)
    expectFailure(results[5]!, 2, /unexpected argument "extra" \(see outbox dead-letters list --help\)/)
  })

  it('rejects ids that are not UUIDs and a bad cursor with exit 2', async () => {
    const env = cliEnv({ DATABASE_URL: t.url })
    const [ids, cursor] = await Promise.all([
      runCli(['dead-letters', 'redrive', 'not-a-uuid', dead[0]!.event_id], env),
      runCli(['dead-letters', 'list', '--after', 'nonsense'], env),
    ])
    expectFailure(ids, 2, /event ids must be UUIDs; not one: "not-a-uuid"/)
    expectFailure(cursor, 2, /--after must be the cursor of a listed dead letter, got "nonsense"/)
  })
})
