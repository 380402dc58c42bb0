import { type Sink, startSink, useTestDatabase } from '@outbox/test-harness'
import { sql } from 'kysely'
import { beforeAll, describe, expect, it, type TestContext } from 'vitest'
import { migrate } from '../src/index.js'
import { buildCli, type CliProcess, cliEnv, expectFailure, runCli, startCli } from './cli-process.js'
import { metricValue, seedEvents, waitFor } from './support.js'

const t = useTestDatabase()

beforeAll(() => buildCli(), 120_000)

async function sink(
  onTestFinished: TestContext['onTestFinished'],
  respond?: Parameters<typeof startSink>[0],
): Promise<Sink> {
  const started = await startSink(respond)
  onTestFinished(() => started.close())
  return started
}

/** The port the relay logged it serves on (`--metrics-port 0` picks a free one). */
async function servedPort(relay: CliProcess): Promise<number> {
  const pattern = /serving metrics and probes.*"port":(\d+)|serving metrics and probes .*port=(\d+)/
  await relay.waitFor(() => pattern.test(relay.stdout()), 'the metrics port line')
  const match = pattern.exec(relay.stdout())!
  return Number(match[1] ?? match[2])
}

async function get(port: number, path: string): Promise<{ status: number; body: string; type: string }> {
  const response = await fetch(`http://127.0.0.1:${port}${path}`)
  return {
    status: response.status,
    body: await response.text(),
    type: response.headers.get('content-type') ?? '',
  }
}

describe.concurrent('outbox relay --metrics-port', () => {
  it('serves /metrics (relay and process metrics), /healthz and /readyz, and closes after the drain', async ({
    onTestFinished,
  }) => {
    const hooks = await sink(onTestFinished)
    const schema = 'relay_http_serves'
    await migrate(t.db, { schema })
    await seedEvents(t.db, ['h1', 'h2'], 2, { schema })
    const relay = startCli(
      ['relay', '--metrics-port', '0', '--metrics-host', '127.0.0.1', '--poll-interval', '50ms'],
      cliEnv({ DATABASE_URL: t.url, OUTBOX_SCHEMA: schema, OUTBOX_ENDPOINT: hooks.url }),
      { onTestFinished },
    )
    const port = await servedPort(relay)
    await waitFor(() => hooks.requests.length === 4, 'four deliveries')

    const health = await get(port, '/healthz')
    expect(health.status).toBe(200)
    expect(JSON.parse(health.body)).toMatchObject({ status: 'ok' })
    await waitFor(async () => (await get(port, '/readyz')).status === 200, '/readyz 200')
    expect(JSON.parse((await get(port, '/readyz')).body)).toEqual({ status: 'ready' })

    const metrics = await get(port, '/metrics')
    expect(metrics.status).toBe(200)
    expect(metrics.type).toMatch(/^text\/plain/)
    expect(
      metricValue(
        metrics.body,
        'outbox_deliveries_total',
        '{subscription="default",outcome="success",status="200"}',
      ),
    ).toBe(4)
    expect(metricValue(metrics.body, 'outbox_relay_ready')).toBe(1)
    // The process metrics of prom-client's collectDefaultMetrics.
    expect(metricValue(metrics.body, 'process_cpu_user_seconds_total')).toBeGreaterThan(0)
    expect(metrics.body).toMatch(/^nodejs_eventloop_lag_seconds /m)
    expect((await get(port, '/nope')).status).toBe(404)

    const result = await relay.stop('SIGTERM')
    expect(result, result.stderr).toMatchObject({ code: 0, stderr: '' })
    // Closed once the relay stopped: nothing listens any more.
    await expect(fetch(`http://127.0.0.1:${port}/healthz`)).rejects.toThrow()
  })

  it('/readyz answers 503 with the reason while the claim loop is stalled, and 200 again once it moves', async ({
    onTestFinished,
  }) => {
    const hooks = await sink(onTestFinished)
    const schema = 'relay_http_stall'
    await migrate(t.db, { schema })
    const relay = startCli(
      [
        'relay',
        '--metrics-port',
        '0',
        '--lease',
        '1500ms',
        '--request-timeout',
        '1000ms',
        '--poll-interval',
        '50ms',
      ],
      cliEnv({ DATABASE_URL: t.url, OUTBOX_SCHEMA: schema, OUTBOX_ENDPOINT: hooks.url }),
      { onTestFinished },
    )
    const port = await servedPort(relay)
    await waitFor(async () => (await get(port, '/readyz')).status === 200, '/readyz 200')
    // Claims wait on this lock until their statement_timeout (the lease) ends them: passes stop completing,
    // while the database itself still answers.
    await t.db.transaction().execute(async (trx) => {
      await sql`LOCK TABLE ${sql.table(`${schema}.outbox_lane`)} IN ACCESS EXCLUSIVE MODE`.execute(trx)
      await waitFor(async () => (await get(port, '/readyz')).status === 503, '/readyz 503', 20_000)
      const answer = JSON.parse((await get(port, '/readyz')).body)
      expect(answer).toMatchObject({ status: 'not ready' })
      expect(answer.reason).toMatch(/^claim loop stalled: no pass completed for \d+ s/)
      // The scrape still answers (the gauges that read the locked tables keep their last values).
      const metrics = await get(port, '/metrics')
      expect(metrics.status, metrics.body).toBe(200)
      expect(metricValue(metrics.body, 'outbox_relay_ready')).toBe(0)
      // Liveness never looks at the database or the loop's passes: restarting would not help.
      expect((await get(port, '/healthz')).status).toBe(200)
    })
    await waitFor(async () => (await get(port, '/readyz')).status === 200, '/readyz 200 again', 20_000)
    const result = await relay.stop('SIGTERM')
    expect(result.code, result.stderr).toBe(0)
  })

  it('/readyz says "stopping" while a SIGTERM drains in-flight requests', async ({ onTestFinished }) => {
    const hooks = await sink(onTestFinished, () => 'hang')
    const schema = 'relay_http_drain'
    await migrate(t.db, { schema })
    await seedEvents(t.db, ['d1'], 1, { schema })
    const relay = startCli(
      ['relay', '--metrics-port', '0', '--stop-timeout', '3s', '--poll-interval', '50ms'],
      cliEnv({ DATABASE_URL: t.url, OUTBOX_SCHEMA: schema, OUTBOX_ENDPOINT: hooks.url }),
      { onTestFinished },
    )
    const port = await servedPort(relay)
    await waitFor(() => hooks.requests.length === 1, 'the hanging request')
    relay.child.kill('SIGTERM')
    await relay.waitFor(() => /SIGTERM received/.test(relay.stdout()), 'the stop line')
    const ready = await get(port, '/readyz')
    expect(ready.status).toBe(503)
    expect(JSON.parse(ready.body)).toEqual({
      status: 'not ready',
      reason: 'stopping: draining in-flight requests',
    })
    expect((await get(port, '/healthz')).status).toBe(200)
    const result = await relay.exited
    expect(result.code, result.stderr).toBe(0)
  })

  it('refuses a bad port before connecting, and a port in use with one line naming it', async ({
    onTestFinished,
  }) => {
    expectFailure(
      await runCli(['relay', '--metrics-port', '70000'], cliEnv({ DATABASE_URL: t.url })),
      2,
      /--metrics-port must be an integer from 0 to 65535, got "70000"/,
    )
    const hooks = await sink(onTestFinished)
    const schema = 'relay_http_clash'
    await migrate(t.db, { schema })
    const env = cliEnv({ DATABASE_URL: t.url, OUTBOX_SCHEMA: schema, OUTBOX_ENDPOINT: hooks.url })
    const first = startCli(['relay', '--metrics-port', '0'], env, { onTestFinished })
    const port = await servedPort(first)
    expectFailure(
      await runCli(['relay', '--metrics-port', String(port)], env),
      1,
      new RegExp(`cannot serve metrics on 0\\.0\\.0\\.0:${port} is already in use`),
    )
    expect((await first.stop('SIGTERM')).code).toBe(0)
  })
})
