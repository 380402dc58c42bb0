import { randomUUID } from 'node:crypto'
import { userInfo } from 'node:os'
import { useTestDatabase } from '@outbox/test-harness'
import { sql } from 'kysely'
import { beforeAll, describe, expect, it } from 'vitest'
import { listAudit, listDeadLetters, migrate } from '../src/index.js'
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
let dry: Seeded
let discarding: Seeded

beforeAll(async () => {
  buildCli()
  ;({ dead } = await seedDeadLetters('public'))
  redriving = await seedDeadLetters('redriving')
  dry = await seedDeadLetters('dry')
  discarding = await seedDeadLetters('discarding')
  // d2 of 'discarding' blocks its lane, as a relay under --on-exhausted block leaves it.
  await sql`UPDATE discarding.outbox_lane SET blocked_reason = 'exhausted', blocked_at = now()
    WHERE aggregate_id = 'd2'`.execute(t.db)
  // A subscriber's answer to d1 with control characters, as the delivery log keeps it.
  await sql`INSERT INTO outbox_delivery_attempt (subscription_id, event_id, aggregate_type, aggregate_id, sequence,
      attempted_at, http_status, outcome, answer)
    VALUES ('00000000-0000-0000-0000-000000000000', ${dead[0]!.event_id}::uuid, 'order', 'd1', 1, now(), 500, 'dead',
      ${'boom \u001b[31mred\u0007\nsecond line'})`.execute(t.db)
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
        ['dead-letters', 'discard'],
        ['dead-letters', 'discard', '--dry-run', '--unblock'],
        ['dead-letters', 'discard', randomUUID(), '--status', '500'],
        ['dead-letters', 'list', '--since', 'yesterday'],
        ['dead-letters', 'list', '--aggregate', 'order'],
        ['dead-letters', 'redrive', '--all', '--tenant', 'acme'],
        ['dead-letters', 'frobnicate'],
      ].map((args) => runCli(args, env)),
    )
    expectFailure(results[0]!, 2, /missing subcommand: outbox dead-letters list\|show\|redrive\|discard/)
    expectFailure(results[1]!, 2, /give the event id to show/)
    expectFailure(results[2]!, 2, /give the event ids to redrive, or --all/)
    expectFailure(results[3]!, 2, /give event ids or --all, not both/)
    expectFailure(results[4]!, 2, /--limit must be an integer from 1 to 10000, got "0"/)
    expectFailure(results[5]!, 2, /unexpected argument "extra" \(see outbox dead-letters list --help\)/)
    expectFailure(
      results[6]!,
      2,
      /give the event ids to discard, or filters .*never deletes every dead letter/,
    )
    expectFailure(results[7]!, 2, /give the event ids to discard, or filters/)
    expectFailure(results[8]!, 2, /give event ids or filters .*not both/)
    expectFailure(results[9]!, 2, /--since takes a duration ago \(e\.g\. 2h, 7d\) or an ISO time/)
    expectFailure(
      results[10]!,
      2,
      /--aggregate takes <type>\/<id>, e\.g\. --aggregate order\/42; got "order"/,
    )
    expectFailure(results[11]!, 2, /give event ids, --all or filters .*not several/)
    expectFailure(
      results[12]!,
      2,
      /unknown subcommand "frobnicate": use outbox dead-letters list\|show\|redrive\|discard/,
    )
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

  it('list narrows with filter flags, and refuses a bad one naming the flag', async () => {
    const env = cliEnv({ DATABASE_URL: t.url })
    const ids = async (...flags: string[]) => {
      const result = await runCli(['dead-letters', 'list', '--json', ...flags], env)
      expect(result, result.stderr).toMatchObject({ code: 0 })
      return JSON.parse(result.stdout).map((one: { aggregateId: string }) => one.aggregateId)
    }
    expect(await ids('--aggregate', 'order/d2')).toEqual(['d2'])
    expect(await ids('--since', '150s')).toEqual(['d2', 'd3'])
    expect(await ids('--until', '150s')).toEqual(['d1'])
    expect(await ids('--event-type', 'order.*', '--status', '500')).toEqual(['d1', 'd2', 'd3'])
    expect(await ids('--event-type', 'user.*')).toEqual([])
    expect(await ids('--subscription', 'default', '--tenant', 'nobody')).toEqual([])
    const none = await runCli(['dead-letters', 'list', '--status', '404'], env)
    expect(none).toMatchObject({ code: 0, stdout: 'no dead letters\n' })
    // A full page names the next one with the same filters.
    const page = await runCli(['dead-letters', 'list', '--event-type', 'order.*', '--limit', '1'], env)
    expect(page.stderr).toMatch(
      /^more may follow: outbox dead-letters list --event-type order\.\* --limit 1 --after \S+\n$/,
    )
    const [status, subscription] = await Promise.all([
      runCli(['dead-letters', 'list', '--status', '42'], env),
      runCli(['dead-letters', 'list', '--subscription', 'no-such'], env),
    ])
    expectFailure(status, 2, /--status must be an HTTP status, an integer from 100 to 599, got "42"/)
    expectFailure(subscription, 2, /no subscription "no-such"/)
  })

  it('show prints the detail, the payload as JSON and the last answer with control characters escaped', async () => {
    const env = cliEnv({ DATABASE_URL: t.url })
    const result = await runCli(['dead-letters', 'show', dead[0]!.event_id], env)
    expect(result, result.stderr).toMatchObject({ code: 0, stderr: '' })
    expect(result.stdout).toContain(`event         ${dead[0]!.event_id}`)
    expect(result.stdout).toMatch(/^aggregate {5}order\/d1 {2}sequence 1$/m)
    expect(result.stdout).toMatch(/^blocks lane {3}no$/m)
    expect(result.stdout).toContain('last answer   boom \\u001b[31mred\\u0007\\nsecond line')
    // No raw control character reaches the terminal: only the line breaks the command itself writes.
    const controls = [...result.stdout].filter((char) => char !== '\n' && /\p{Cc}/u.test(char))
    expect(controls).toEqual([])
    expect(result.stdout).toContain('payload:\n  {\n    "n": 0,\n    "id": "d1"\n  }\n')
    const json = await runCli(['dead-letters', 'show', dead[0]!.event_id, '--json'], env)
    expect(JSON.parse(json.stdout)).toMatchObject({
      eventId: dead[0]!.event_id,
      payload: { id: 'd1', n: 0 },
      lastAnswer: 'boom \u001b[31mred\u0007\nsecond line',
    })
    const missing = await runCli(['dead-letters', 'show', randomUUID()], env)
    expectFailure(missing, 1, /no dead letter [0-9a-f-]+ \(unknown, pending or already sent/)
  })

  it('redrive --dry-run prints what a filter would take and changes nothing; the real run takes it', async () => {
    const env = cliEnv({ DATABASE_URL: t.url, OUTBOX_SCHEMA: 'dry' })
    const preview = await runCli(['dead-letters', 'redrive', '--aggregate', 'order/d1', '--dry-run'], env)
    expect(preview, preview.stderr).toMatchObject({
      code: 0,
      stdout: `would redrive 1 (dry run, nothing changed):\n  ${dry.dead[0]!.event_id}\n`,
    })
    expect((await rows('dry')).filter((row) => row.status === 'dead')).toHaveLength(3)
    const real = await runCli(
      ['dead-letters', 'redrive', '--aggregate', 'order/d1', '--actor', 'cli-test'],
      env,
    )
    expect(real.stdout).toContain(`redriven 1 (pending again`)
    // seedEvents enqueues the aggregates concurrently, so ids do not follow their names: compare as a set.
    const stillDead = (await rows('dry'))
      .filter((row) => row.status === 'dead')
      .map((row) => row.aggregate_id)
    expect(stillDead.sort()).toEqual(['d2', 'd3'])
    expect((await listAudit(t.db, { schema: 'dry' }))[0]).toMatchObject({
      actor: 'cli-test',
      action: 'dead-letters.redrive',
      target: { filter: { aggregateType: 'order', aggregateId: 'd1' } },
    })
  })

  it("discard refuses a lane's blocker without --unblock, then resumes the lane with it", async () => {
    const env = cliEnv({ DATABASE_URL: t.url, OUTBOX_SCHEMA: 'discarding' })
    const blocker = discarding.dead[1]!.event_id
    const refused = await runCli(['dead-letters', 'discard', blocker], env)
    expectFailure(
      refused,
      1,
      /refused to discard 1 dead letter that blocks its lane: .*order\/d2 of subscription .*pass unblockLanes: true \(--unblock\) to resume those lanes as if their dead letter had been skipped/,
    )
    const dryRefused = await runCli(['dead-letters', 'discard', blocker, '--dry-run'], env)
    expectFailure(dryRefused, 1, /--unblock/)
    expect((await rows('discarding')).filter((row) => row.status === 'dead')).toHaveLength(3)

    const done = await runCli(['dead-letters', 'discard', blocker, '--unblock', '--actor', 'tester'], env)
    expect(done, done.stderr).toMatchObject({ code: 0, stderr: '' })
    expect(done.stdout).toBe(
      [
        'discarded 1 (deleted for good):',
        `  ${blocker}`,
        'resume 1 lane(s) as if their dead letter had been skipped:',
        '  order/d2 of subscription 00000000-0000-0000-0000-000000000000: 0 event(s) released',
        '',
      ].join('\n'),
    )
    const lane = await t.db
      .withSchema('discarding')
      .selectFrom('outbox_lane')
      .select('blocked_reason')
      .where('aggregate_id', '=', 'd2')
      .executeTakeFirstOrThrow()
    expect(lane.blocked_reason).toBeNull()

    // By filter, with the OS user as the default actor.
    const byFilter = await runCli(['dead-letters', 'discard', '--aggregate', 'order/d1', '--json'], env)
    expect(JSON.parse(byFilter.stdout)).toMatchObject({
      dryRun: false,
      discarded: [{ eventId: discarding.dead[0]!.event_id }],
    })
    expect(
      (await rows('discarding')).filter((row) => row.status === 'dead').map((row) => row.aggregate_id),
    ).toEqual(['d3'])
    const audit = await listAudit(t.db, { schema: 'discarding' })
    expect(audit.map((entry) => [entry.action, entry.actor])).toEqual([
      ['dead-letters.discard', userInfo().username || 'cli'],
      ['dead-letters.discard', 'tester'],
    ])
  })
})
