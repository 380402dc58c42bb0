import { startSink, useTestDatabase } from '@outbox/test-harness'
import { sql } from 'kysely'
import { beforeAll, describe, expect, it } from 'vitest'
import {
  createSubscription,
  disableSubscription,
  enqueue,
  IMPLICIT_SUBSCRIPTION_ID,
  Relay,
  silentLogger,
} from '../src/index.js'
import { buildCli, cliEnv, expectFailure, runCli } from './cli-process.js'

const t = useTestDatabase()

beforeAll(async () => {
  buildCli()
  await disableSubscription(t.db, IMPLICIT_SUBSCRIPTION_ID)
}, 120_000)

async function statuses(aggregateId: string): Promise<string[]> {
  const { rows } = await sql<{ status: string }>`
    SELECT status FROM outbox WHERE aggregate_id = ${aggregateId} ORDER BY sequence`.execute(t.db)
  return rows.map((row) => row.status)
}

describe('outbox subscriptions replay', () => {
  it('puts the events since --since back to pending, progress on stderr and the summary on stdout', async () => {
    const env = cliEnv({ DATABASE_URL: t.url })
    const sink = await startSink()
    try {
      await createSubscription(t.db, { url: sink.url, name: 'cli-replay' })
      for (const id of ['c1', 'c2']) {
        for (let n = 0; n < 2; n++) {
          await t.db.transaction().execute((trx) =>
            enqueue(trx, {
              aggregateType: 'order',
              aggregateId: id,
              eventType: 'order.updated',
              payload: { n },
            }),
          )
        }
      }
      const relay = new Relay({ db: t.db, allowPrivateNetworks: true, logger: silentLogger })
      expect(await relay.runOnce()).toMatchObject({ delivered: 4 })

      const json = await runCli(['subscriptions', 'replay', 'cli-replay', '--since', '1h', '--json'], env)
      expect(json, json.stderr).toMatchObject({ code: 0 })
      expect(JSON.parse(json.stdout)).toEqual({ aggregates: 2, events: 4, skippedLeased: 0, complete: true })
      expect(json.stderr).toMatch(/^replay: 4 events of 2 aggregates pending again$/m)
      expect(await statuses('c1')).toEqual(['pending', 'pending'])
      expect(await relay.runOnce()).toMatchObject({ delivered: 4 })

      // --until as an ISO time, in text: the summary says what happened.
      const until = new Date(Date.now() + 60_000).toISOString()
      const text = await runCli(
        ['subscriptions', 'replay', 'cli-replay', '--since', '1h', '--until', until, '--batch-size', '1'],
        env,
      )
      expect(text.stdout.trim()).toBe(
        'replayed 4 events of 2 aggregates to cli-replay; relays send them again in order',
      )
      expect(await relay.runOnce()).toMatchObject({ delivered: 4 })

      // A lane a relay holds past --lease-wait is left out, and the exit code says to run it again.
      await sql`UPDATE outbox_lane SET claim_token = gen_random_uuid(), leased_until = now() + interval '1 hour'
        WHERE aggregate_id = 'c2'`.execute(t.db)
      const leased = await runCli(
        ['subscriptions', 'replay', 'cli-replay', '--since', '1h', '--lease-wait', '200ms'],
        env,
      )
      expect(leased.code).toBe(3)
      expect(leased.stdout).toMatch(
        /replayed 2 events of 1 aggregates to cli-replay; 1 lanes stayed under a relay's lease/,
      )
      expect(await statuses('c2')).toEqual(['sent', 'sent'])
      await sql`UPDATE outbox_lane SET claim_token = NULL, leased_until = NULL`.execute(t.db)
    } finally {
      await sink.close()
    }
  })

  it('refuses bad input naming the flag, and an unknown subscription', async () => {
    const env = cliEnv({ DATABASE_URL: t.url })
    await createSubscription(t.db, { url: 'https://example.com/hooks', name: 'cli-bad-input' })
    expectFailure(
      await runCli(['subscriptions', 'replay', '--since', '1h'], env),
      2,
      /replay takes one subscription/,
    )
    expectFailure(await runCli(['subscriptions', 'replay', 'x'], env), 2, /replay needs --since/)
    expectFailure(
      await runCli(['subscriptions', 'replay', 'x', '--since', 'yesterday'], env),
      2,
      /--since must be how long ago \(2h, 7d, 90m\) or an ISO time/,
    )
    expectFailure(
      await runCli(['subscriptions', 'replay', 'x', '--since', '1h', '--batch-size', '0'], env),
      2,
      /--batch-size must be an integer from 1 to 10000/,
    )
    expectFailure(
      await runCli(['subscriptions', 'replay', 'cli-bad-input', '--since', '1h', '--until', '2h'], env),
      2,
      /--until \(.*\) must be later than --since/,
    )
    expectFailure(
      await runCli(['subscriptions', 'replay', 'nobody', '--since', '1h'], env),
      1,
      /no subscription "nobody"/,
    )
  })
})
