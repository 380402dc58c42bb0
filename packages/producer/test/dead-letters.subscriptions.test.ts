import { useTestDatabase } from '@outbox/test-harness'
import { sql } from 'kysely'
import { beforeAll, beforeEach, describe, expect, it } from 'vitest'
import { checkIntegrity, enqueueMany, listDeadLetters, OutboxError, redrive } from '../src/index.js'
import { buildCli, cliEnv, expectFailure, runCli } from './cli-process.js'
import { storeSubscriptions } from './support.js'

const t = useTestDatabase()

let ids: Record<string, string> = {}

/** Enqueues `count` events of one aggregate; each goes to both stored subscriptions. Returns their event ids. */
async function enqueueFor(aggregateId: string, count: number): Promise<string[]> {
  const events = await t.db.transaction().execute((trx) =>
    enqueueMany(
      trx,
      Array.from({ length: count }, (_, n) => ({
        aggregateType: 'order',
        aggregateId,
        eventType: 'order.updated',
        payload: { n },
      })),
    ),
  )
  return events.map((event) => event.eventId)
}

/**
 * Dead-letters one event in one subscription as a relay under `onExhausted: 'block'` does: the row dead, the rows
 * behind it at 'infinity', the lane blocked.
 */
async function killBlocking(eventId: string, name: string, secondsAgo: number): Promise<void> {
  const id = ids[name]!
  const { rows } = await sql<{ aggregate_id: string }>`
    UPDATE outbox SET status = 'dead', attempts = 8, last_status = 500, last_error = 'HTTP 500',
      dead_at = now() - ${secondsAgo} * interval '1 second'
    WHERE event_id = ${eventId}::uuid AND subscription_id = ${id}::uuid RETURNING aggregate_id`.execute(t.db)
  const aggregateId = rows[0]!.aggregate_id
  await sql`UPDATE outbox SET available_at = 'infinity'
    WHERE subscription_id = ${id}::uuid AND aggregate_id = ${aggregateId} AND status = 'pending'`.execute(
    t.db,
  )
  await sql`UPDATE outbox_lane SET blocked_reason = 'exhausted', blocked_at = now()
    WHERE subscription_id = ${id}::uuid AND aggregate_id = ${aggregateId}`.execute(t.db)
}

/** Each subscription's view of one aggregate: its rows as [sequence, status, at infinity], and its lane's block. */
async function view(name: string, aggregateId: string) {
  const id = ids[name]!
  const { rows } = await sql<{ sequence: string; status: string; at_infinity: boolean }>`
    SELECT sequence, status, available_at = 'infinity' AS at_infinity FROM outbox
    WHERE subscription_id = ${id}::uuid AND aggregate_id = ${aggregateId} ORDER BY sequence`.execute(t.db)
  const lane = await t.db
    .selectFrom('outbox_lane')
    .select('blocked_reason')
    .where(sql<boolean>`subscription_id = ${id}::uuid`)
    .where('aggregate_id', '=', aggregateId)
    .executeTakeFirstOrThrow()
  return {
    rows: rows.map((row) => [Number(row.sequence), row.status, row.at_infinity]),
    blocked: lane.blocked_reason,
  }
}

const BLOCKED_VIEW = {
  rows: [
    [1, 'dead', false],
    [2, 'pending', true],
  ],
  blocked: 'exhausted',
}
const RESUMED_VIEW = {
  rows: [
    [1, 'pending', false],
    [2, 'pending', false],
  ],
  blocked: null,
}

beforeAll(async () => {
  buildCli()
  ids = await storeSubscriptions(t.db, { a: {}, b: {} })
})

beforeEach(async () => {
  await sql`TRUNCATE outbox, outbox_counter, outbox_lane`.execute(t.db)
})

describe('dead letters per subscription', () => {
  it('lists the same event dead in two subscriptions as two dead letters, pages through both, and filters by subscription', async () => {
    const [first] = await enqueueFor('x', 2)
    await killBlocking(first!, 'a', 20)
    await killBlocking(first!, 'b', 10)

    const all = await listDeadLetters(t.db)
    expect(
      all.map((dead) => [dead.eventId, dead.subscriptionId, dead.subscriptionName, dead.tenant]),
    ).toEqual([
      [first, ids.a, 'a', null],
      [first, ids.b, 'b', null],
    ])
    // The keyset cursor is per row: one page each, neither repeated nor skipped.
    const page1 = await listDeadLetters(t.db, { limit: 1 })
    const page2 = await listDeadLetters(t.db, { limit: 1, after: page1[0]!.cursor })
    const page3 = await listDeadLetters(t.db, { limit: 1, after: page2[0]!.cursor })
    expect([...page1, ...page2].map((dead) => dead.subscriptionId)).toEqual([ids.a, ids.b])
    expect(page3).toEqual([])

    const onlyB = await listDeadLetters(t.db, { subscriptionId: ids.b!.toUpperCase() })
    expect(onlyB.map((dead) => dead.subscriptionId)).toEqual([ids.b])
    expect(await listDeadLetters(t.db, { subscriptionId: ids.a, after: page1[0]!.cursor })).toEqual([])
  })

  it('redrives one subscription without touching the other subscription’s dead row of the SAME event', async () => {
    const [first] = await enqueueFor('x', 2)
    await killBlocking(first!, 'a', 20)
    await killBlocking(first!, 'b', 10)

    const onlyA = await redrive(t.db, { eventIds: [first!], subscriptionId: ids.a })
    expect(onlyA).toEqual({
      redriven: [first],
      notDead: [],
      deliveries: [{ eventId: first, subscriptionId: ids.a }],
      dryRun: false,
    })
    expect(await view('a', 'x')).toEqual(RESUMED_VIEW)
    expect(await view('b', 'x')).toEqual(BLOCKED_VIEW)
    expect((await checkIntegrity(t.db)).violations).toEqual([])

    // The event is no longer dead in a: narrowed to a, it is not a dead letter; unnarrowed, b's row is revived.
    expect(await redrive(t.db, { eventIds: [first!], subscriptionId: ids.a })).toMatchObject({
      redriven: [],
      notDead: [first],
    })
    expect(await redrive(t.db, { eventIds: [first!] })).toEqual({
      redriven: [first],
      notDead: [],
      deliveries: [{ eventId: first, subscriptionId: ids.b }],
      dryRun: false,
    })
    expect(await view('b', 'x')).toEqual(RESUMED_VIEW)
  })

  it('redrives an event id in every subscription where it is dead; { all, subscriptionId } revives one subscription’s', async () => {
    const [x1] = await enqueueFor('x', 2)
    const [y1] = await enqueueFor('y', 2)
    await killBlocking(x1!, 'a', 40)
    await killBlocking(x1!, 'b', 30)
    await killBlocking(y1!, 'a', 20)
    await killBlocking(y1!, 'b', 10)

    const both = await redrive(t.db, { eventIds: [x1!] })
    expect(both.redriven).toEqual([x1])
    expect(both.deliveries.map((one) => one.subscriptionId).sort()).toEqual([ids.a, ids.b].sort())
    expect(await view('a', 'x')).toEqual(RESUMED_VIEW)
    expect(await view('b', 'x')).toEqual(RESUMED_VIEW)

    const allOfB = await redrive(t.db, { all: true, subscriptionId: ids.b })
    expect(allOfB.deliveries).toEqual([{ eventId: y1, subscriptionId: ids.b }])
    expect(await view('a', 'y')).toEqual(BLOCKED_VIEW)
    expect(await view('b', 'y')).toEqual(RESUMED_VIEW)
    expect((await checkIntegrity(t.db)).violations).toEqual([])
  })

  it('refuses a subscriptionId that is not a UUID, naming the option', async () => {
    for (const call of [
      () => listDeadLetters(t.db, { subscriptionId: 'a' }),
      () => redrive(t.db, { all: true, subscriptionId: 'a' }),
    ]) {
      const error = await call().catch((caught: unknown) => caught)
      expect(error).toBeInstanceOf(OutboxError)
      expect(error).toMatchObject({ code: 'ERR_OUTBOX_INVALID_OPTION', option: 'subscriptionId' })
    }
  })

  it('the CLI lists with the subscription shown, and redrives with --subscription', async () => {
    const [first] = await enqueueFor('x', 2)
    await killBlocking(first!, 'a', 20)
    await killBlocking(first!, 'b', 10)
    const env = cliEnv({ DATABASE_URL: t.url })

    const [table, json] = await Promise.all([
      runCli(['dead-letters', 'list'], env),
      runCli(['dead-letters', 'list', '--json', '--subscription', ids.b!], env),
    ])
    expect(table, table.stderr).toMatchObject({ code: 0, stderr: '' })
    const lines = table.stdout.trimEnd().split('\n')
    expect(lines[0]).toMatch(/^DEAD AT\s+SUBSCRIPTION\s+EVENT ID\s+AGGREGATE\s+SEQ/)
    expect(lines.slice(1).map((line) => line.split(/\s+/).slice(1, 3))).toEqual([
      ['a', first],
      ['b', first],
    ])
    expect(json, json.stderr).toMatchObject({ code: 0, stderr: '' })
    expect(JSON.parse(json.stdout)).toEqual([
      expect.objectContaining({ eventId: first, subscriptionId: ids.b, subscriptionName: 'b', tenant: null }),
    ])

    const redriven = await runCli(['dead-letters', 'redrive', '--subscription', ids.a!, first!], env)
    expect(redriven, redriven.stderr).toMatchObject({ code: 0, stderr: '' })
    expect(redriven.stdout).toBe(
      [
        'redriven 1 (pending again, same event id and sequence, attempts reset):',
        `  ${first}  subscription ${ids.a}`,
        '',
      ].join('\n'),
    )
    expect(await view('a', 'x')).toEqual(RESUMED_VIEW)
    expect(await view('b', 'x')).toEqual(BLOCKED_VIEW)

    // A name is looked up; one that names no subscription is a usage error.
    const byName = await runCli(['dead-letters', 'list', '--subscription', 'b', '--json'], env)
    expect(JSON.parse(byName.stdout).map((one: { subscriptionId: string }) => one.subscriptionId)).toEqual([
      ids.b,
    ])
    const bad = await runCli(['dead-letters', 'list', '--subscription', 'nope'], env)
    expectFailure(bad, 2, /no subscription "nope" \(see outbox subscriptions list\)/)
  })
})
