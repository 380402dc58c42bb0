import { useTestDatabase } from '@outbox/test-harness'
import { sql } from 'kysely'
import { beforeAll, describe, expect, it } from 'vitest'
import { migrate, stats } from '../src/index.js'
import { buildCli, cliEnv, expectFailure, onTerminal, runCli, startCli } from './cli-process.js'
import { seedEvents } from './support.js'

const t = useTestDatabase()

const EXPECTED = { pending: 5, inFlight: 1, struggling: 1, suspect: 1, dead: 1, blocked: 1 }

beforeAll(async () => {
  buildCli()
  // a: 3 pending, its head 2 minutes old, its lane under a live lease; b: 2 pending, the head failed 3 times, the
  // lane parked by a 409, the head suspect (its takeovers reached its attempts); c: its only event dead-lettered.
  await seedEvents(t.db, ['a', 'b', 'c'], 1)
  await seedEvents(t.db, ['a', 'b'], 1)
  await seedEvents(t.db, ['a'], 1)
  await sql`UPDATE outbox SET created_at = now() - interval '125 seconds' WHERE aggregate_id = 'a' AND sequence = 1`.execute(
    t.db,
  )
  await sql`UPDATE outbox SET attempts = 3, suspect = true WHERE aggregate_id = 'b' AND sequence = 1`.execute(
    t.db,
  )
  await sql`UPDATE outbox SET status = 'dead', dead_at = now(), attempts = 8 WHERE aggregate_id = 'c'`.execute(
    t.db,
  )
  await sql`UPDATE outbox_lane SET blocked_reason = 'conflict', blocked_at = now() WHERE aggregate_id = 'b'`.execute(
    t.db,
  )
  await sql`UPDATE outbox_lane SET claim_token = gen_random_uuid(), leased_until = now() + interval '1 hour'
    WHERE aggregate_id = 'a'`.execute(t.db)
}, 120_000)

const WATCH_LINE =
  /^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z) lagSeconds=[\d.]+ pending=5 inFlight=1 struggling=1 suspect=1 dead=1 blocked=1$/

describe.concurrent('outbox stats', () => {
  it('prints the figures as JSON that match the rows', async () => {
    const result = await runCli(['stats', '--json'], cliEnv({ DATABASE_URL: t.url }))
    expect(result, result.stderr).toMatchObject({ code: 0, stderr: '' })
    const printed = JSON.parse(result.stdout)
    expect(Object.keys(printed)).toEqual([
      'lagSeconds',
      'pending',
      'inFlight',
      'struggling',
      'suspect',
      'dead',
      'blocked',
      'subscriptions',
      'warnings',
    ])
    expect(printed).toMatchObject(EXPECTED)
    // A single-endpoint outbox: the implicit subscription holds every figure.
    expect(printed.subscriptions).toEqual([
      {
        id: '00000000-0000-0000-0000-000000000000',
        name: 'default',
        state: 'enabled',
        tenant: null,
        breaker: 'closed',
        disabledReason: null,
        disabledAt: null,
        ...EXPECTED,
        dropped: 0,
        lagSeconds: printed.lagSeconds,
        oldestDueSeconds: printed.subscriptions[0].oldestDueSeconds,
      },
    ])
    expect(printed.warnings).toEqual([])
    expect(printed.lagSeconds).toBeGreaterThanOrEqual(125)
    expect(printed.lagSeconds).toBeLessThan(200)
    // Lag is read at another moment: compare everything else.
    const { lagSeconds: _lag, subscriptions, ...library } = await stats(t.db)
    expect(printed).toMatchObject(library)
    expect(printed.subscriptions).toMatchObject(
      subscriptions.map(({ lagSeconds: _, oldestDueSeconds: __, ...sub }) => sub),
    )
    // Every row is due (none was tried): the oldest due event is the oldest pending one.
    expect(Math.abs(printed.subscriptions[0].oldestDueSeconds - printed.lagSeconds)).toBeLessThan(1)
  })

  it('prints a table an operator reads at a glance', async () => {
    const result = await runCli(['stats'], cliEnv({ DATABASE_URL: t.url }))
    expect(result, result.stderr).toMatchObject({ code: 0, stderr: '' })
    const lines = result.stdout.trimEnd().split('\n')
    expect(lines).toHaveLength(7)
    expect(lines[0]).toMatch(/^lag\s+\d+m \d\ds\s+age of the oldest undelivered event$/)
    expect(lines[1]).toMatch(/^pending\s+5\s/)
    expect(lines[2]).toMatch(/^in flight\s+1\s/)
    expect(lines[3]).toMatch(/^struggling\s+1\s+lane heads that failed 3\+ times$/)
    expect(lines[4]).toMatch(/^suspect\s+1\s+heads whose relays died sending them: each is sent alone$/)
    expect(lines[5]).toMatch(/^dead\s+1\s+see: outbox dead-letters list$/)
    expect(lines[6]).toMatch(/^blocked\s+1\s+lanes parked/)
  })

  it('--watch prints a line per tick when not on a terminal and stops cleanly on SIGINT', async ({
    onTestFinished,
  }) => {
    const watch = startCli(['stats', '--watch', '--interval', '200ms'], cliEnv({ DATABASE_URL: t.url }), {
      onTestFinished,
    })
    await watch.waitFor(() => watch.lines().length >= 2, 'two ticks')
    const result = await watch.stop('SIGINT')
    expect(result, result.stderr).toMatchObject({ code: 0, signal: null, stderr: '' })
    const lines = result.stdout.trimEnd().split('\n')
    expect(lines.length).toBeGreaterThanOrEqual(2)
    const times = lines.map((line) => {
      const match = WATCH_LINE.exec(line)
      expect(match, line).not.toBeNull()
      return Date.parse(match![1]!)
    })
    expect(times[1]! - times[0]!).toBeGreaterThanOrEqual(150)
  })

  onTerminal.it('--watch redraws in place on a terminal and stops on Ctrl-C', async ({ onTestFinished }) => {
    const watch = startCli(['stats', '--watch', '--interval', '100ms'], cliEnv({ DATABASE_URL: t.url }), {
      terminal: true,
      onTestFinished,
    })
    const frames = () => watch.stdout().split('outbox stats · ').length - 1
    await watch.waitFor(() => frames() >= 3, 'three frames')
    watch.type('\x03')
    const result = await watch.exited
    expect(result.code, result.stdout).toBe(0)
    // Each frame after the first moves the cursor up over the previous one (9 lines) and clears below it.
    expect(result.stdout.split('\x1b[9A\x1b[0J').length - 1).toBe(frames() - 1)
    expect(result.stdout).toMatch(/outbox stats · \S+ · schema public · every 0\.1s · .* \(Ctrl-C to stop\)/)
    expect(result.stdout).toMatch(/dead\s+1\s+see: outbox dead-letters list/)
  })

  it('--watch --json prints one JSON object per tick and stops on SIGTERM', async ({ onTestFinished }) => {
    const watch = startCli(
      ['stats', '--watch', '--json', '--interval', '100ms'],
      cliEnv({ DATABASE_URL: t.url }),
      { onTestFinished },
    )
    await watch.waitFor(() => watch.lines().length >= 2, 'two ticks')
    const result = await watch.stop('SIGTERM')
    expect(result, result.stderr).toMatchObject({ code: 0, signal: null, stderr: '' })
    for (const line of result.stdout.trimEnd().split('\n')) {
      const tick = JSON.parse(line)
      expect(tick).toMatchObject(EXPECTED)
      expect(new Date(tick.time).toISOString()).toBe(tick.time)
    }
  })

  it('--watch keeps going through a failure after the first read, saying so on stderr', async ({
    onTestFinished,
  }) => {
    await migrate(t.db, { schema: 'cli_watch' })
    const watch = startCli(
      ['stats', '--watch', '--interval', '100ms', '--schema', 'cli_watch'],
      cliEnv({ DATABASE_URL: t.url }),
      { onTestFinished },
    )
    await watch.waitFor(() => watch.lines().length >= 1, 'a first tick')
    await sql`ALTER SCHEMA cli_watch RENAME TO cli_watch_away`.execute(t.db)
    try {
      const deadline = Date.now() + 15_000
      while (!watch.stderr().includes('stats unavailable') && Date.now() < deadline) {
        await new Promise((resolve) => setTimeout(resolve, 50))
      }
    } finally {
      await sql`ALTER SCHEMA cli_watch_away RENAME TO cli_watch`.execute(t.db)
    }
    const before = watch.lines().length
    await watch.waitFor(() => watch.lines().length > before, 'a tick after the schema came back')
    const result = await watch.stop('SIGINT')
    expect(result.code).toBe(0)
    expect(result.stderr).toMatch(
      /^\S+Z stats unavailable: the outbox tables are missing in schema "cli_watch" .* \(retrying\)$/m,
    )
    expect(result.stderr).not.toMatch(/\n\s+at /)
  })

  it('rejects a bad or misplaced --interval with exit 2', async () => {
    const env = cliEnv({ DATABASE_URL: t.url })
    const [alone, bad, tooShort] = await Promise.all([
      runCli(['stats', '--interval', '2s'], env),
      runCli(['stats', '--watch', '--interval', 'often'], env),
      runCli(['stats', '--watch', '--interval', '10ms'], env),
    ])
    expectFailure(alone, 2, /--interval only applies with --watch/)
    expectFailure(bad, 2, /--interval must be a duration like 30d, 12h, 15m, 90s or 500ms .*"often"/)
    expectFailure(tooShort, 2, /--interval must be at least 100ms/)
  })
})
