import { useTestDatabase } from '@outbox/test-harness'
import { sql } from 'kysely'
import { beforeAll, describe, expect, it } from 'vitest'
import { enqueue, type StatsFigures, stats } from '../src/index.js'
import { buildCli, cliEnv, runCli } from './cli-process.js'
import { storeSubscriptions } from './support.js'

const t = useTestDatabase()

let ids: Record<string, string> = {}

const FIGURES: readonly (keyof StatsFigures)[] = [
  'pending',
  'inFlight',
  'struggling',
  'suspect',
  'dead',
  'blocked',
]

async function enqueueTo(aggregateId: string, count: number, tenant?: string): Promise<void> {
  for (let n = 0; n < count; n++) {
    await t.db.transaction().execute((trx) =>
      enqueue(trx, {
        aggregateType: 'order',
        aggregateId,
        eventType: 'order.updated',
        payload: { n },
        tenant,
      }),
    )
  }
}

/** One subscription's rows of one aggregate, by sequence. */
function rowsOf(name: string, aggregateId: string) {
  return sql`subscription_id = ${ids[name]}::uuid AND aggregate_id = ${aggregateId}`
}

beforeAll(async () => {
  buildCli()
  // a receives every event, b only tenant acme's: x (acme) goes to both, y (no tenant) to a alone.
  ids = await storeSubscriptions(t.db, { a: {}, b: { tenant: 'acme' } })
  await enqueueTo('x', 3, 'acme')
  await enqueueTo('y', 2)
  // a: its lane of y under a live lease, its head of x failed 3 times and suspect (its takeovers reached them).
  await sql`UPDATE outbox_lane SET claim_token = gen_random_uuid(), leased_until = now() + interval '1 hour'
    WHERE ${rowsOf('a', 'y')}`.execute(t.db)
  await sql`UPDATE outbox SET attempts = 3, suspect = true WHERE ${rowsOf('a', 'x')} AND sequence = 1`.execute(
    t.db,
  )
  // b: the SAME event x#1 dead-lettered there alone, its lane of x parked by a 409, its x#2 five minutes old.
  await sql`UPDATE outbox SET status = 'dead', dead_at = now(), attempts = 8 WHERE ${rowsOf('b', 'x')} AND sequence = 1`.execute(
    t.db,
  )
  await sql`UPDATE outbox_lane SET blocked_reason = 'conflict', blocked_at = now() WHERE ${rowsOf('b', 'x')}`.execute(
    t.db,
  )
  await sql`UPDATE outbox SET created_at = now() - interval '300 seconds' WHERE ${rowsOf('b', 'x')} AND sequence = 2`.execute(
    t.db,
  )
}, 120_000)

describe('stats per subscription', () => {
  it('gives each subscription its own figures, and totals that are their sums (lag: their maximum)', async () => {
    const snapshot = await stats(t.db)
    // The implicit subscription is disabled and holds nothing: not listed.
    expect(snapshot.subscriptions.map((sub) => sub.name)).toEqual(['a', 'b'])
    const [a, b] = snapshot.subscriptions
    expect(a).toMatchObject({
      id: ids.a,
      state: 'enabled',
      tenant: null,
      pending: 5,
      inFlight: 1,
      struggling: 1,
      suspect: 1,
      dead: 0,
      blocked: 0,
    })
    expect(b).toMatchObject({
      id: ids.b,
      state: 'enabled',
      tenant: 'acme',
      pending: 2,
      inFlight: 0,
      struggling: 0,
      suspect: 0,
      dead: 1,
      blocked: 1,
    })
    expect(b!.lagSeconds).toBeGreaterThanOrEqual(300)
    expect(a!.lagSeconds).toBeLessThan(300)
    for (const figure of FIGURES) {
      expect(snapshot[figure], figure).toBe(a![figure] + b![figure])
    }
    expect(snapshot.lagSeconds).toBe(Math.max(a!.lagSeconds, b!.lagSeconds))
    expect(snapshot.warnings).toEqual([])
  })

  it('warns about a disabled subscription holding pending events, and lists the implicit one once it holds work', async () => {
    await sql`UPDATE outbox_subscription SET state = 'disabled' WHERE id = ${ids.b}::uuid`.execute(t.db)
    // A dead letter left in the implicit subscription from before it was disabled.
    await sql`INSERT INTO outbox (event_id, subscription_id, aggregate_type, aggregate_id, sequence, event_type,
                                  payload, status, dead_at)
      VALUES (gen_random_uuid(), '00000000-0000-0000-0000-000000000000', 'order', 'old', 1, 'order.updated', '{}',
              'dead', now())`.execute(t.db)
    try {
      const snapshot = await stats(t.db)
      expect(snapshot.warnings).toEqual([
        'disabled subscription b holds 2 pending events; they pin pruning: enable or delete it',
      ])
      expect(snapshot.subscriptions.map((sub) => [sub.name, sub.state, sub.dead])).toEqual([
        ['default', 'disabled', 1],
        ['a', 'enabled', 0],
        ['b', 'disabled', 1],
      ])
      expect(snapshot.dead).toBe(2)

      const env = cliEnv({ DATABASE_URL: t.url })
      const [text, json] = await Promise.all([runCli(['stats'], env), runCli(['stats', '--json'], env)])
      expect(text.code, text.stderr).toBe(0)
      const lines = text.stdout.trimEnd().split('\n')
      // The totals as a single-endpoint outbox prints them, then a row per subscription.
      expect(lines[1]).toMatch(/^pending\s+7\s/)
      expect(lines[7]).toBe('')
      expect(lines[8]).toMatch(
        /^SUBSCRIPTION\s+STATE\s+BREAKER\s+TENANT\s+LAG\s+PENDING\s+IN FLIGHT\s+STRUGGLING\s+DEAD\s+BLOCKED$/,
      )
      expect(lines[9]).toMatch(/^default\s+disabled\s+closed\s+-\s+0s\s+0\s+0\s+0\s+1\s+0$/)
      expect(lines[10]).toMatch(/^a\s+enabled\s+closed\s+-\s+\S+\s+5\s+1\s+1\s+0\s+0$/)
      expect(lines[11]).toMatch(/^b\s+disabled\s+closed\s+acme\s+5m 0\ds\s+2\s+0\s+0\s+1\s+1$/)
      expect(text.stderr).toBe(
        'warning: disabled subscription b holds 2 pending events; they pin pruning: enable or delete it\n',
      )
      expect(json.code, json.stderr).toBe(0)
      const printed = JSON.parse(json.stdout)
      expect(printed.subscriptions.map((sub: { id: string }) => sub.id)).toEqual([
        '00000000-0000-0000-0000-000000000000',
        ids.a,
        ids.b,
      ])
      expect(printed.warnings).toEqual(snapshot.warnings)
    } finally {
      await sql`UPDATE outbox_subscription SET state = 'enabled' WHERE id = ${ids.b}::uuid`.execute(t.db)
      await sql`DELETE FROM outbox WHERE aggregate_id = 'old'`.execute(t.db)
    }
  })
})
