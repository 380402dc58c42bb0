import { randomUUID } from 'node:crypto'
import { useTestDatabase } from '@outbox/test-harness'
import { sql } from 'kysely'
import { beforeAll, describe, expect, it } from 'vitest'
import { createSubscription, listDeliveryAttempts } from '../src/index.js'
import { buildCli, cliEnv, expectFailure, runCli } from './cli-process.js'

const t = useTestDatabase()

const EVENT = randomUUID()
let acme = ''

beforeAll(async () => {
  buildCli()
  acme = (await createSubscription(t.db, { url: 'https://acme.example/hooks', name: 'acme' })).id
  const other = randomUUID()
  // Three attempts of one event for acme a second apart (oldest first), one for another subscription.
  const rows = [
    [acme, EVENT, '42', 3, 500, 'failed', `{"error":"${'upstream exploded\\n'.repeat(10)}"}`, null],
    [acme, EVENT, '42', 2, null, 'failed', null, 'UND_ERR_CONNECT_TIMEOUT: connect timed out'],
    [acme, EVENT, '42', 1, 200, 'delivered', '{"status":"applied"}', null],
    [other, randomUUID(), '7', 0, 200, 'delivered', '', null],
  ] as const
  for (const [subscription, event, aggregateId, ageS, status, outcome, answer, error] of rows) {
    await sql`
      INSERT INTO outbox_delivery_attempt (subscription_id, event_id, aggregate_type, aggregate_id, sequence,
        attempted_at, duration_ms, http_status, outcome, answer, error)
      VALUES (${subscription}::uuid, ${event}::uuid, 'order', ${aggregateId}, 1, now() - ${ageS} * interval '1 second',
        12, ${status}, ${outcome}, ${answer}, ${error})`.execute(t.db)
  }
}, 120_000)

describe.concurrent('outbox deliveries', () => {
  it('list --json prints what listDeliveryAttempts returns, filtered by subscription name', async () => {
    const result = await runCli(
      ['deliveries', 'list', '--subscription', 'acme', '--json'],
      cliEnv({ DATABASE_URL: t.url }),
    )
    expect(result, result.stderr).toMatchObject({ code: 0, stderr: '' })
    const printed = JSON.parse(result.stdout)
    expect(printed.map((one: { outcome: string }) => one.outcome)).toEqual(['delivered', 'failed', 'failed'])
    expect(printed).toEqual(
      JSON.parse(JSON.stringify(await listDeliveryAttempts(t.db, { subscriptionId: acme }))),
    )
  })

  it('list prints one line per attempt, answer or error cut to fit, and names the next page on stderr', async () => {
    const env = cliEnv({ DATABASE_URL: t.url })
    const table = await runCli(['deliveries', 'list', '--event', EVENT], env)
    expect(table, table.stderr).toMatchObject({ code: 0, stderr: '' })
    const lines = table.stdout.trimEnd().split('\n')
    expect(lines[0]).toMatch(
      /^ATTEMPTED AT\s+SUBSCRIPTION\s+EVENT ID\s+AGGREGATE\s+SEQ\s+OUTCOME\s+HTTP\s+MS\s+ANSWER \/ ERROR$/,
    )
    expect(lines).toHaveLength(4)
    expect(lines[1]).toMatch(
      new RegExp(
        `^\\S+Z\\s+acme\\s+${EVENT}\\s+order/42\\s+1\\s+delivered\\s+200\\s+12\\s+\\{"status":"applied"\\}$`,
      ),
    )
    expect(lines[2]).toMatch(/\s+failed\s+-\s+12\s+UND_ERR_CONNECT_TIMEOUT: connect timed out$/)
    // The multi-line answer stays on its line, cut with an ellipsis.
    expect(lines[3]).toMatch(/\s+failed\s+500\s+12\s+\{"error":"upstream exploded\\n.*…$/)

    const first = await runCli(['deliveries', 'list', '--aggregate', 'order/42', '--limit', '2'], env)
    expect(first.code).toBe(0)
    const next = /--after (\S+)\n$/.exec(first.stderr)
    expect(first.stderr).toMatch(
      /^more may follow: outbox deliveries list --aggregate order\/42 --limit 2 --after \S+\n$/,
    )
    const second = await runCli(
      ['deliveries', 'list', '--aggregate', 'order/42', '--limit', '2', '--after', next![1]!],
      env,
    )
    expect(second, second.stderr).toMatchObject({ code: 0, stderr: '' })
    expect(second.stdout.trimEnd().split('\n')).toHaveLength(2)
    expect(second.stdout).toContain('500')
  })

  it('refuses a bad --aggregate (one form, type/id, as every command takes it), --event or unknown subscription name with a usage error', async () => {
    const env = cliEnv({ DATABASE_URL: t.url })
    expectFailure(
      await runCli(['deliveries', 'list', '--aggregate', 'order:42'], env),
      2,
      /--aggregate takes <type>\/<id>/,
    )
    expectFailure(await runCli(['deliveries', 'list', '--event', '42'], env), 2, /--event takes an event id/)
    expectFailure(
      await runCli(['deliveries', 'list', '--subscription', 'nobody'], env),
      2,
      /no subscription "nobody"/,
    )
    expectFailure(await runCli(['deliveries', 'list', '--after', 'x'], env), 2, /--after must be the cursor/)
    expectFailure(await runCli(['deliveries'], env), 2, /missing subcommand/)
  })

  it('prune --delivery-log-retention deletes old log rows only when given', async () => {
    const schema = 'cli_log_prune'
    const { migrate } = await import('../src/index.js')
    await migrate(t.db, { schema })
    await sql`
      INSERT INTO ${sql.id(schema, 'outbox_delivery_attempt')} (subscription_id, event_id, aggregate_type,
        aggregate_id, sequence, attempted_at, outcome)
      SELECT gen_random_uuid(), gen_random_uuid(), 'order', 'p', 1, now() - n * interval '1 day', 'delivered'
      FROM generate_series(1, 10) n`.execute(t.db)
    const env = cliEnv({ DATABASE_URL: t.url, OUTBOX_SCHEMA: schema })
    const without = await runCli(['prune', '--retention', '30d', '--json'], env)
    expect(JSON.parse(without.stdout)).toEqual({ removed: 0, dropped: 0, caughtUp: true, sent: 0, dead: 0 })
    const result = await runCli(['prune', '--retention', '30d', '--delivery-log-retention', '7d'], env)
    expect(result, result.stderr).toMatchObject({ code: 0 })
    expect(result.stdout).toBe('deleted 4 rows (0 sent, 0 dead letters, 4 delivery log); caught up\n')
    expect(await listDeliveryAttempts(t.db, { schema })).toHaveLength(6)
  })
})
