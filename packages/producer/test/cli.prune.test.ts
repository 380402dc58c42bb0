import { useTestDatabase } from '@outbox/test-harness'
import { sql } from 'kysely'
import { beforeAll, describe, expect, it } from 'vitest'
import { migrate } from '../src/index.js'
import { buildCli, cliEnv, expectFailure, REFUSED_URL, runCli, startCli } from './cli-process.js'
import { seedEvents } from './support.js'

const t = useTestDatabase()

beforeAll(() => buildCli(), 120_000)

/** A freshly migrated schema for one test: the tests run concurrently and each prunes its own rows. */
async function freshSchema(name: string): Promise<string> {
  await migrate(t.db, { schema: name })
  return name
}

async function countBy(schema: string): Promise<Record<string, number>> {
  const { rows } = await sql<{ kind: string; count: string }>`
    SELECT status || CASE WHEN coalesce(sent_at, dead_at) < now() - interval '20 days' THEN '_old' ELSE '' END AS kind,
           count(*) AS count
    FROM ${sql.id(schema, 'outbox')} GROUP BY 1`.execute(t.db)
  return Object.fromEntries(rows.map((row) => [row.kind, Number(row.count)]))
}

describe.concurrent('outbox prune', () => {
  it('deletes sent rows past retention in bounded batches; exit 3 until it has caught up', async () => {
    const schema = await freshSchema('prune_batches')
    // 25 sent 40 days ago, 3 sent yesterday, 2 dead 40 days ago, 2 pending: only the 25 are past a 30d retention.
    await seedEvents(t.db, ['p1', 'p2', 'p3', 'p4', 'p5'], 5, { schema })
    await seedEvents(t.db, ['recent1', 'recent2', 'recent3', 'dead1', 'dead2', 'live1', 'live2'], 1, {
      schema,
    })
    await sql`UPDATE ${sql.id(schema, 'outbox')} SET status = 'sent', sent_at = now() - interval '40 days' WHERE aggregate_id LIKE 'p%'`.execute(
      t.db,
    )
    await sql`UPDATE ${sql.id(schema, 'outbox')} SET status = 'sent', sent_at = now() - interval '1 day' WHERE aggregate_id LIKE 'recent%'`.execute(
      t.db,
    )
    await sql`UPDATE ${sql.id(schema, 'outbox')} SET status = 'dead', dead_at = now() - interval '40 days' WHERE aggregate_id LIKE 'dead%'`.execute(
      t.db,
    )
    expect(await countBy(schema)).toEqual({ sent_old: 25, sent: 3, dead_old: 2, pending: 2 })
    const env = cliEnv({ DATABASE_URL: t.url })

    const first = await runCli(
      ['prune', '--schema', schema, '--retention', '30d', '--batch-size', '10', '--max-batches', '2'],
      env,
    )
    expect(first.code, first.stderr).toBe(3)
    expect(first.stderr).toBe(
      'prune: sent rows: batch 1, 10 deleted, 10 so far\nprune: sent rows: batch 2, 10 deleted, 20 so far\n',
    )
    expect(first.stdout).toBe(
      'deleted 20 rows (20 sent, 0 dead letters); NOT caught up: stopped after --max-batches 2; run it again, more often, or raise --max-batches\n',
    )
    expect(await countBy(schema)).toEqual({ sent_old: 5, sent: 3, dead_old: 2, pending: 2 })

    const second = await runCli(
      ['prune', '--schema', schema, '--retention', '30d', '--batch-size', '10', '--max-batches', '2'],
      env,
    )
    expect(second.code, second.stderr).toBe(0)
    expect(second.stdout).toBe('deleted 5 rows (5 sent, 0 dead letters); caught up\n')
    expect(await countBy(schema)).toEqual({ sent: 3, dead_old: 2, pending: 2 })

    const dead = await runCli(
      [
        'prune',
        '--schema',
        schema,
        '--retention',
        '30d',
        '--dead-letter-retention',
        '21d',
        '--pause',
        '1ms',
        '--json',
      ],
      env,
    )
    expect(dead.code, dead.stderr).toBe(0)
    expect(JSON.parse(dead.stdout)).toEqual({ removed: 2, dropped: 0, caughtUp: true, sent: 0, dead: 2 })
    expect(dead.stderr).toContain('prune: dead rows: batch 1, 2 deleted, 2 so far')
    // Pending events are never touched, and recent sent rows stay until their retention is up.
    expect(await countBy(schema)).toEqual({ sent: 3, pending: 2 })
  })

  it('reports --json with caughtUp false and still exits 3', async () => {
    const schema = await freshSchema('prune_json')
    await seedEvents(t.db, ['j1', 'j2', 'j3'], 1, { schema })
    await sql`UPDATE ${sql.id(schema, 'outbox')} SET status = 'sent', sent_at = now() - interval '3 hours' WHERE aggregate_id LIKE 'j%'`.execute(
      t.db,
    )
    const result = await runCli(
      ['prune', '--schema', schema, '--retention', '2h', '--batch-size', '1', '--max-batches', '2', '--json'],
      cliEnv({ DATABASE_URL: t.url }),
    )
    expect(result.code, result.stderr).toBe(3)
    expect(JSON.parse(result.stdout)).toEqual({ removed: 2, dropped: 0, caughtUp: false, sent: 2, dead: 0 })
  })

  it('stops between batches on SIGINT and says so (exit 130)', async ({ onTestFinished }) => {
    const schema = await freshSchema('prune_interrupt')
    await seedEvents(t.db, ['i1', 'i2', 'i3', 'i4'], 1, { schema })
    await sql`UPDATE ${sql.id(schema, 'outbox')} SET status = 'sent', sent_at = now() - interval '2 days' WHERE aggregate_id LIKE 'i%'`.execute(
      t.db,
    )
    const prune = startCli(
      ['prune', '--schema', schema, '--retention', '1d', '--batch-size', '1', '--pause', '2s'],
      cliEnv({ DATABASE_URL: t.url }),
      { onTestFinished },
    )
    await prune.waitFor(() => prune.stderr().includes('batch 1,'), 'the first batch')
    const result = await prune.stop('SIGINT')
    expect(result.code, result.stderr).toBe(130)
    expect(result.stdout).toMatch(
      /^deleted 1 rows \(1 sent, 0 dead letters\); interrupted by SIGINT: run it again to finish\n$/,
    )
  })

  it('rejects a missing or bad retention and bad numbers with exit 2, before connecting', async () => {
    // Nothing listens at this URL: a command that connected first would fail with exit 1 instead.
    const env = cliEnv({ DATABASE_URL: REFUSED_URL })
    const results = await Promise.all(
      [
        ['prune'],
        ['prune', '--retention', 'a month'],
        ['prune', '--retention', '30d', '--dead-letter-retention', '-1d'],
        ['prune', '--retention', '30d', '--batch-size', '0'],
        ['prune', '--retention', '30d', '--max-batches', '2.5'],
        ['prune', '--retention', '30d', '--pause', '-5'],
        ['prune', '--retention', '30d', '--older-than', '1d'],
      ].map((args) => runCli(args, env)),
    )
    expectFailure(results[0]!, 2, /missing --retention, e\.g\. --retention 30d/)
    expectFailure(results[1]!, 2, /--retention must be a duration .*"a month"/)
    expectFailure(results[2]!, 2, /--dead-letter-retention needs a value \(to pass one starting with "-"/)
    expectFailure(results[3]!, 2, /--batch-size must be an integer from 1 to 1000000, got "0"/)
    expectFailure(results[4]!, 2, /--max-batches must be an integer ≥ 1, got "2\.5"/)
    expectFailure(results[5]!, 2, /--pause needs a value/)
    expectFailure(results[6]!, 2, /unknown option --older-than/)
  })
})
