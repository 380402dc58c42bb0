import { createServer, type Socket } from 'node:net'
import { freePort, openKysely, startPostgres, startSink } from '@outbox/test-harness'
import { beforeAll, describe, expect, it } from 'vitest'
import { DATABASE_WAIT_LOG_INTERVAL_MS } from '../src/cli/wait-for-database.js'
import { migrate } from '../src/index.js'
import { buildCli, type CliProcess, cliEnv, startCli } from './cli-process.js'
import { seedEvents, waitFor } from './support.js'

// These tests start PostgreSQL late, so they always run their own embedded server, whatever DATABASE_URL says.

beforeAll(() => buildCli(), 120_000)

/** The relay's JSON log lines so far. */
function logLines(relay: CliProcess): { time: string; msg: string; [field: string]: unknown }[] {
  return relay.lines().map((line) => JSON.parse(line))
}

/** The port the relay logged it serves its probes on (`--metrics-port 0` picks a free one). */
async function probePort(relay: CliProcess): Promise<number> {
  await relay.waitFor(
    () => logLines(relay).some((line) => line.msg === 'serving metrics and probes'),
    'the probes port line',
  )
  return Number(logLines(relay).find((line) => line.msg === 'serving metrics and probes')!.port)
}

async function get(port: number, path: string): Promise<{ status: number; body: any }> {
  const response = await fetch(`http://127.0.0.1:${port}${path}`)
  return { status: response.status, body: await response.json() }
}

/**
 * A TCP server that accepts each connection and cuts it at once, counting them: a database port that is "there"
 * but not answering yet. Each count is one try of the relay (nothing else connects while it waits: `/readyz` asks
 * no database then).
 */
async function startCuttingPort(port: number): Promise<{ tries: () => number; close: () => Promise<void> }> {
  let tries = 0
  const sockets = new Set<Socket>()
  const server = createServer((socket) => {
    tries += 1
    sockets.add(socket)
    socket.destroy()
  })
  await new Promise<void>((resolve) => server.listen(port, '127.0.0.1', resolve))
  return {
    tries: () => tries,
    close: async () => {
      for (const socket of sockets) socket.destroy()
      await new Promise<void>((resolve) => server.close(() => resolve()))
    },
  }
}

describe.concurrent('outbox relay started before its database', () => {
  it('waits — /healthz 200, /readyz 503 with the reason, the wait logged once per interval — and delivers once it answers', async ({
    onTestFinished,
  }) => {
    const port = await freePort()
    const sink = await startSink()
    onTestFinished(() => sink.close())
    const relay = startCli(
      [
        'relay',
        '--endpoint',
        sink.url,
        '--metrics-port',
        '0',
        '--metrics-host',
        '127.0.0.1',
        '--log-format',
        'json',
        '--poll-interval',
        '50ms',
      ],
      cliEnv({ DATABASE_URL: `postgres://postgres:postgres@127.0.0.1:${port}/postgres` }),
      { onTestFinished },
    )
    const probes = await probePort(relay)
    expect(await get(probes, '/healthz')).toMatchObject({ status: 200, body: { status: 'ok' } })
    await waitFor(
      async () => (await get(probes, '/readyz')).body.reason?.startsWith('waiting for the database') === true,
      'readiness to say the relay waits',
    )
    const notReady = await get(probes, '/readyz')
    expect(notReady.status).toBe(503)
    expect(notReady.body.reason).toBe(
      `waiting for the database: cannot connect to PostgreSQL at 127.0.0.1:${port}: connection refused; check DATABASE_URL (is the server running and listening there?)`,
    )

    // Several tries, seen from the database's side.
    const cutting = await startCuttingPort(port)
    try {
      await waitFor(() => cutting.tries() >= 3, 'three tries of the relay', 60_000)
    } finally {
      await cutting.close()
    }
    const tried = cutting.tries()

    const server = await startPostgres({ port })
    onTestFinished(() => server.stop())
    const db = openKysely(server.url())
    onTestFinished(() => db.destroy())
    await migrate(db)
    await seedEvents(db, ['late'], 1)
    await waitFor(
      () => sink.requests.some((request) => request.json.aggregate_id === 'late'),
      'the delivery',
      60_000,
    )
    await waitFor(async () => (await get(probes, '/readyz')).status === 200, 'readiness', 30_000)
    const result = await relay.stop('SIGTERM')
    expect(result, result.stderr).toMatchObject({ code: 0, stderr: '' })

    const lines = logLines(relay)
    const waits = lines.filter((line) => line.msg.startsWith('waiting for the database'))
    const answered = lines.find((line) => line.msg === 'the database answers: starting')
    expect(answered, result.stdout).toBeDefined()
    expect(answered!.tries).toBeGreaterThan(tried)
    // Once when the wait began, then at most once per interval of the wait — never once per try.
    const waitedMs = Date.parse(answered!.time) - Date.parse(waits[0]!.time)
    expect(waits.length).toBeGreaterThanOrEqual(1)
    expect(waits.length).toBeLessThanOrEqual(1 + Math.floor(waitedMs / DATABASE_WAIT_LOG_INTERVAL_MS))
    expect(waits.length).toBeLessThan(tried)
    expect(waits[0]!.reason).toMatch(/connection refused/)
    expect(lines.findIndex((line) => line.msg === 'relay started')).toBeGreaterThan(lines.indexOf(answered!))
  }, 120_000)

  it('a SIGTERM while it waits exits 0 at once, having started nothing', async ({ onTestFinished }) => {
    const port = await freePort()
    const relay = startCli(
      ['relay', '--endpoint', 'http://127.0.0.1:9/hooks', '--log-format', 'json'],
      cliEnv({ DATABASE_URL: `postgres://postgres:postgres@127.0.0.1:${port}/postgres` }),
      { onTestFinished },
    )
    await relay.waitFor(
      () => logLines(relay).some((line) => line.msg.startsWith('waiting for the database')),
      'the wait line',
    )
    const result = await relay.stop('SIGTERM')
    expect(result, result.stderr).toMatchObject({ code: 0, stderr: '' })
    const messages = logLines(relay).map((line) => line.msg)
    expect(messages).toContain('SIGTERM received while waiting for the database: exiting')
    expect(messages).not.toContain('relay started')
  })
})
