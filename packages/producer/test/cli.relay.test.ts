import { randomBytes } from 'node:crypto'
import { type Sink, startSink, useTestDatabase } from '@outbox/test-harness'
import { sql } from 'kysely'
import { Webhook } from 'standardwebhooks'
import { beforeAll, describe, expect, it, type TestContext } from 'vitest'
import { REPEAT_GRACE_MS } from '../src/cli/interrupt.js'
import { enqueue, migrate } from '../src/index.js'
import {
  buildCli,
  type CliProcess,
  cliEnv,
  expectFailure,
  REFUSED_URL,
  runCli,
  startCli,
} from './cli-process.js'
import { seedEvents, waitFor } from './support.js'

const t = useTestDatabase()

beforeAll(() => buildCli(), 120_000)

/** A loopback webhook sink closed when the calling test ends. */
async function sink(
  onTestFinished: TestContext['onTestFinished'],
  respond?: Parameters<typeof startSink>[0],
): Promise<Sink> {
  const started = await startSink(respond)
  onTestFinished(() => started.close())
  return started
}

/**
 * A freshly migrated schema for one test: the tests run concurrently, and relays sharing a schema would take each
 * other's lanes.
 */
async function freshSchema(name: string): Promise<string> {
  await migrate(t.db, { schema: name })
  return name
}

function secret(): string {
  return `whsec_${randomBytes(24).toString('base64')}`
}

/** Valid base64, but below the Standard Webhooks minimum of 24 bytes. */
const SHORT_SECRET = `whsec_${randomBytes(16).toString('base64')}`

async function started(relay: CliProcess): Promise<void> {
  await relay.waitFor(
    () => / relay started /.test(relay.stdout()) || /"msg":"relay started"/.test(relay.stdout()),
    'relay started',
  )
}

async function lanes(schema: string, aggregateIds: readonly string[]) {
  return await t.db
    .withSchema(schema)
    .selectFrom('outbox_lane')
    .select(['aggregate_id', 'claim_token', 'leased_until', 'blocked_reason'])
    .where('aggregate_id', 'in', aggregateIds)
    .orderBy('aggregate_id')
    .execute()
}

async function events(schema: string, aggregateIds: readonly string[]) {
  return await t.db
    .withSchema(schema)
    .selectFrom('outbox')
    .select(['event_id', 'aggregate_id', 'sequence', 'status', 'attempts'])
    .where('aggregate_id', 'in', aggregateIds)
    .orderBy('aggregate_id')
    .orderBy('sequence')
    .execute()
}

const UUID = '[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}'

describe.concurrent('outbox relay', () => {
  it('delivers to the endpoint, signs with every rotation secret, logs a line per delivery, stops on SIGTERM', async ({
    onTestFinished,
  }) => {
    const hooks = await sink(onTestFinished)
    const schema = await freshSchema('relay_signed')
    const ids = ['t1', 't2', 't3']
    await seedEvents(t.db, ids, 2, { schema })
    const [a, b] = [secret(), secret()]
    const relay = startCli(
      ['relay', '--log-format', 'text', '--poll-interval', '50ms'],
      cliEnv({
        DATABASE_URL: t.url,
        OUTBOX_SCHEMA: schema,
        OUTBOX_ENDPOINT: `${hooks.url}?token=abc123`,
        OUTBOX_SECRET: `${a}, ${b}`,
      }),
      { onTestFinished },
    )
    await started(relay)
    await waitFor(
      () => relay.lines().filter((line) => line.includes(' delivered ')).length === 6,
      'six delivered lines',
    )
    const result = await relay.stop('SIGTERM')
    expect(result, result.stderr).toMatchObject({ code: 0, signal: null, stderr: '' })

    // Each aggregate's events arrived in sequence order, signed with both secrets.
    expect(hooks.requests).toHaveLength(6)
    for (const id of ids) {
      expect(
        hooks.requests
          .filter((request) => request.json.aggregate_id === id)
          .map((request) => request.json.sequence),
      ).toEqual([1, 2])
    }
    for (const key of [a, b]) {
      for (const request of hooks.requests) {
        expect(() =>
          new Webhook(key).verify(request.body, request.headers as Record<string, string>),
        ).not.toThrow()
      }
    }
    expect(String(hooks.requests[0]!.headers['webhook-signature']).split(' ')).toHaveLength(2)
    for (const row of await events(schema, ids)) expect(row.status).toBe('sent')
    for (const lane of await lanes(schema, ids))
      expect(lane).toMatchObject({ claim_token: null, blocked_reason: null })

    const lines = result.stdout.trimEnd().split('\n')
    expect(lines[0]).toMatch(
      /^\S+Z INFO {2}relay started endpoint=http:\/\/127\.0\.0\.1:\d+\/hooks database=\S+ schema=relay_signed concurrency=16 batchSize=200 leaseMs=60000 requestTimeoutMs=10000 maxAttempts=8 onExhausted=skip signingSecrets=2 wakeUps="polling every 50ms"$/,
    )
    const delivered = lines.filter((line) => line.includes(' delivered '))
    const byId = new Map(hooks.requests.map((request) => [request.json.event_id as string, request.json]))
    for (const line of delivered) {
      const match = new RegExp(
        `^\\S+Z INFO  delivered lane=order:(t\\d) event=delivery:success eventId=(${UUID}) eventType=order\\.updated sequence=(\\d) httpStatus=200 deliveryStatus=applied attempts=1 latencyMs=\\d+$`,
      ).exec(line)
      expect(match, line).not.toBeNull()
      expect(byId.get(match![2]!)).toMatchObject({ aggregate_id: match![1], sequence: Number(match![3]) })
    }
    expect(lines.at(-2)).toMatch(
      /^\S+Z INFO {2}SIGTERM received: stopping \(finishing in-flight requests, releasing claims\) stopTimeoutMs=10000$/,
    )
    expect(lines.at(-1)).toMatch(/^\S+Z INFO {2}relay stopped lanes=\d+ aborted=0 unflushed=0$/)
    expect(result.stdout).not.toContain('UNSIGNED')
    // Neither the secrets nor the endpoint's query string (which may hold a token) are ever printed.
    for (const text of [a, b, a.slice(6), b.slice(6), 'abc123']) {
      expect(result.stdout).not.toContain(text)
      expect(result.stderr).not.toContain(text)
    }
  })

  it('logs retries, dead letters and blocked lanes as JSON lines; --log-level warn hides successes', async ({
    onTestFinished,
  }) => {
    const hooks = await sink(onTestFinished, (request) =>
      request.json?.aggregate_id === 'bad'
        ? { status: 500, body: { error: 'boom' } }
        : { status: 200, body: { status: 'applied' } },
    )
    const schema = await freshSchema('relay_failing')
    await seedEvents(t.db, ['bad', 'good'], 1, { schema })
    await seedEvents(t.db, ['bad'], 1, { schema })
    const [a, b] = [secret(), secret()]
    const relay = startCli(
      [
        'relay',
        '--endpoint',
        hooks.url,
        '--schema',
        schema,
        '--secret',
        a,
        '--secret',
        b,
        '--retry-schedule',
        '20ms',
        '--on-exhausted',
        'block',
        '--poll-interval',
        '20ms',
        '--log-format',
        'json',
        '--log-level',
        'warn',
      ],
      cliEnv({ DATABASE_URL: t.url, OUTBOX_SECRET: secret() }),
      { onTestFinished },
    )
    await relay.waitFor(() => relay.stdout().includes('"event":"lane:blocked"'), 'the blocked lane')
    await waitFor(
      () => hooks.requests.some((request) => request.json.aggregate_id === 'good'),
      'the good event',
    )
    const result = await relay.stop('SIGTERM')
    expect(result, result.stderr).toMatchObject({ code: 0, stderr: '' })

    const logged = result.stdout
      .trimEnd()
      .split('\n')
      .map((line) => JSON.parse(line))
    for (const entry of logged) {
      expect(new Date(entry.time).toISOString()).toBe(entry.time)
      expect(['warn', 'error']).toContain(entry.level)
    }
    const [head] = (await events(schema, ['bad'])).filter((row) => row.sequence === '1')
    const byEvent = (name: string) => logged.filter((entry) => entry.event === name)
    expect(byEvent('delivery:success')).toEqual([])
    expect(byEvent('delivery:retry')).toEqual([
      expect.objectContaining({
        level: 'warn',
        msg: 'delivery failed; will retry',
        eventId: head!.event_id,
        aggregateType: 'order',
        aggregateId: 'bad',
        sequence: 1,
        attempts: 1,
        httpStatus: 500,
        retryInMs: expect.any(Number),
      }),
    ])
    expect(byEvent('delivery:dead')).toEqual([
      expect.objectContaining({
        level: 'error',
        eventId: head!.event_id,
        attempts: 2,
        httpStatus: 500,
        onExhausted: 'block',
        error: expect.stringContaining('500'),
      }),
    ])
    expect(byEvent('lane:blocked')).toEqual([
      expect.objectContaining({
        level: 'warn',
        aggregateId: 'bad',
        reason: 'exhausted',
        eventId: head!.event_id,
      }),
    ])
    // The flags' secrets were used, not the environment's.
    const signed = hooks.requests[0]!
    for (const key of [a, b]) {
      expect(() =>
        new Webhook(key).verify(signed.body, signed.headers as Record<string, string>),
      ).not.toThrow()
    }
    expect(await events(schema, ['bad'])).toMatchObject([
      { sequence: '1', status: 'dead', attempts: 2 },
      { sequence: '2', status: 'pending', attempts: 0 },
    ])
    expect(await lanes(schema, ['bad', 'good'])).toMatchObject([
      { aggregate_id: 'bad', blocked_reason: 'exhausted', claim_token: null },
      { aggregate_id: 'good', blocked_reason: null, claim_token: null },
    ])
    expect(hooks.requests.filter((request) => request.json.aggregate_id === 'bad')).toHaveLength(2)
  })

  it('on SIGTERM with requests in flight, aborts them after --stop-timeout, releases every claim, exits 0', async ({
    onTestFinished,
  }) => {
    const hooks = await sink(onTestFinished, (request) =>
      request.json?.aggregate_id === 'quick' ? { status: 200, body: { status: 'applied' } } : 'hang',
    )
    const schema = await freshSchema('relay_stopping')
    const ids = ['hang1', 'hang2', 'quick']
    await seedEvents(t.db, ids, 1, { schema })
    const relay = startCli(
      [
        'relay',
        '--endpoint',
        hooks.url,
        '--schema',
        schema,
        '--stop-timeout',
        '300ms',
        '--poll-interval',
        '20ms',
        '--log-format',
        'json',
      ],
      cliEnv({ DATABASE_URL: t.url }),
      { onTestFinished },
    )
    await started(relay)
    await waitFor(() => hooks.requests.length === 3, 'three requests')
    await relay.waitFor(() => relay.stdout().includes('"event":"delivery:success"'), 'the quick delivery')
    // The hanging lanes are held under live claims right now.
    expect((await lanes(schema, ['hang1', 'hang2'])).map((lane) => lane.claim_token !== null)).toEqual([
      true,
      true,
    ])

    const result = await relay.stop('SIGTERM', 10_000)
    expect(result, result.stderr).toMatchObject({ code: 0, signal: null, stderr: '' })
    const logged = result.stdout
      .trimEnd()
      .split('\n')
      .map((line) => JSON.parse(line))
    const [quick] = await events(schema, ['quick'])
    expect(logged.find((entry) => entry.event === 'delivery:success')).toMatchObject({
      level: 'info',
      msg: 'delivered',
      eventId: quick!.event_id,
      aggregateType: 'order',
      aggregateId: 'quick',
      sequence: 1,
      httpStatus: 200,
      deliveryStatus: 'applied',
      attempts: 1,
    })
    expect(logged.at(-1)).toMatchObject({ level: 'info', msg: 'relay stopped', aborted: 2 })
    // Claims handed back at once: another relay need not wait for the 60 s lease. Nothing was lost or sent.
    for (const lane of await lanes(schema, ids)) expect(lane.claim_token).toBeNull()
    expect((await events(schema, ids)).map((row) => row.status)).toEqual(['pending', 'pending', 'sent'])
  })

  it('a second signal exits at once without waiting for in-flight requests', async ({ onTestFinished }) => {
    const hooks = await sink(onTestFinished, () => 'hang')
    const schema = await freshSchema('relay_forced')
    await seedEvents(t.db, ['stuck'], 1, { schema })
    const relay = startCli(
      [
        'relay',
        '--log-format',
        'text',
        '--endpoint',
        hooks.url,
        '--schema',
        schema,
        '--poll-interval',
        '20ms',
      ],
      cliEnv({ DATABASE_URL: t.url }),
      { onTestFinished },
    )
    await started(relay)
    await waitFor(() => hooks.requests.length === 1, 'the hanging request')
    relay.child.kill('SIGINT')
    await relay.waitFor(() => relay.stdout().includes('SIGINT received: stopping'), 'the stop to begin')
    // A second Ctrl-C, pressed after the first one's grace (the same keypress delivered twice is ignored, below).
    await new Promise((resolve) => setTimeout(resolve, REPEAT_GRACE_MS + 100))
    const result = await relay.stop('SIGINT', 5000)
    expect(result.code).toBe(130)
    expect(result.stdout).toMatch(/WARN {2}second SIGINT: exiting without releasing claims/)
    expect(result.stderr).toBe('')
  })

  it('one Ctrl-C delivered twice at once (the terminal and npx both send it) stops gracefully, releasing its claims', async ({
    onTestFinished,
  }) => {
    const hooks = await sink(onTestFinished, () => 'hang')
    const schema = await freshSchema('relay_double')
    await seedEvents(t.db, ['stuck'], 1, { schema })
    const relay = startCli(
      [
        'relay',
        '--log-format',
        'text',
        '--endpoint',
        hooks.url,
        '--schema',
        schema,
        '--stop-timeout',
        '300ms',
        '--poll-interval',
        '20ms',
      ],
      cliEnv({ DATABASE_URL: t.url }),
      { onTestFinished },
    )
    await started(relay)
    await waitFor(() => hooks.requests.length === 1, 'the hanging request')
    relay.child.kill('SIGINT')
    const result = await relay.stop('SIGINT', 10_000)
    expect(result, result.stderr).toMatchObject({ code: 0, signal: null, stderr: '' })
    expect(result.stdout).not.toMatch(/second SIGINT/)
    expect(result.stdout).toMatch(/relay stopped/)
    for (const lane of await lanes(schema, ['stuck'])) expect(lane.claim_token).toBeNull()
  })

  it('warns once that it sends unsigned, with or without --verbose, and never when it signs', async ({
    onTestFinished,
  }) => {
    const hooks = await sink(onTestFinished)
    const schema = await freshSchema('relay_unsigned')
    await seedEvents(t.db, ['u1', 'u2'], 2, { schema })
    const run = (flags: readonly string[]) =>
      startCli(
        [
          'relay',
          '--log-format',
          'text',
          '--endpoint',
          hooks.url,
          '--schema',
          schema,
          '--poll-interval',
          '20ms',
          ...flags,
        ],
        cliEnv({ DATABASE_URL: t.url }),
        { onTestFinished },
      )
    const warning =
      /^\S+Z WARN {2}sending webhooks UNSIGNED: no signing secret is set, so the subscriber cannot tell these requests from forged ones; .*OUTBOX_SECRET.* echo "whsec_\$\(openssl rand -base64 32\)" signed=false$/
    // Without --verbose the relay's own diagnostics are silenced: the CLI says this one itself.
    const quiet = run([])
    await started(quiet)
    await waitFor(() => hooks.requests.length === 4, 'the four events')
    const quietResult = await quiet.stop('SIGTERM')
    expect(quietResult, quietResult.stderr).toMatchObject({ code: 0, stderr: '' })
    expect(quietResult.stdout.split('\n').filter((line) => line.includes('UNSIGNED'))).toEqual([
      expect.stringMatching(warning),
    ])
    expect(hooks.requests.every((request) => request.headers['webhook-signature'] === undefined)).toBe(true)

    // With --verbose the relay's own warning shows (at its first unsigned request), and only once.
    await seedEvents(t.db, ['u3', 'u4'], 2, { schema })
    const verbose = run(['--verbose'])
    await started(verbose)
    await waitFor(() => hooks.requests.length === 8, 'four more events')
    const verboseResult = await verbose.stop('SIGTERM')
    expect(verboseResult, verboseResult.stderr).toMatchObject({ code: 0, stderr: '' })
    expect(verboseResult.stdout.split('\n').filter((line) => line.includes('UNSIGNED'))).toEqual([
      expect.stringMatching(warning),
    ])
  })

  it('--listen wakes on NOTIFY long before the next poll, and stops on SIGINT', async ({
    onTestFinished,
  }) => {
    const hooks = await sink(onTestFinished)
    const schema = await freshSchema('relay_listen')
    const relay = startCli(
      [
        'relay',
        '--log-format',
        'text',
        '--endpoint',
        hooks.url,
        '--schema',
        schema,
        '--listen',
        '--poll-interval',
        '10m',
      ],
      cliEnv({ DATABASE_URL: t.url }),
      { onTestFinished },
    )
    await started(relay)
    expect(relay.stdout()).toContain('wakeUps="LISTEN outbox_relay_listen + polling every 600000ms"')
    // The relay's first poll ran at start; from now on only a notification can wake it within 10 min, so a delivery
    // within the wait below is the notification's on any machine.
    await new Promise((resolve) => setTimeout(resolve, 300))
    const { eventId } = await t.db.transaction().execute((trx) =>
      enqueue(
        trx,
        {
          aggregateType: 'order',
          aggregateId: 'listen1',
          eventType: 'order.created',
          payload: {},
        },
        { schema },
      ),
    )
    await waitFor(
      () => hooks.requests.some((request) => request.json.event_id === eventId),
      'the notified event',
      60_000,
    )
    const result = await relay.stop('SIGINT')
    expect(result, result.stderr).toMatchObject({ code: 0, stderr: '' })
  })

  it('logs a database failure while running as one explained line, keeps going, and delivers once it heals', async ({
    onTestFinished,
  }) => {
    const hooks = await sink(onTestFinished)
    await freshSchema('cli_outage')
    const relay = startCli(
      [
        'relay',
        '--log-format',
        'text',
        '--endpoint',
        hooks.url,
        '--schema',
        'cli_outage',
        '--poll-interval',
        '20ms',
      ],
      cliEnv({ DATABASE_URL: t.url }),
      { onTestFinished },
    )
    await started(relay)
    await sql`ALTER SCHEMA cli_outage RENAME TO cli_outage_away`.execute(t.db)
    try {
      await relay.waitFor(() => relay.stdout().includes('relay claim failed'), 'the claim failure')
    } finally {
      await sql`ALTER SCHEMA cli_outage_away RENAME TO cli_outage`.execute(t.db)
    }
    await seedEvents(t.db, ['healed'], 1, { schema: 'cli_outage' })
    await waitFor(
      () => hooks.requests.some((request) => request.json.aggregate_id === 'healed'),
      'the delivery',
      30_000,
    )
    const result = await relay.stop('SIGTERM')
    expect(result, result.stderr).toMatchObject({ code: 0, stderr: '' })
    expect(result.stdout).toMatch(
      /^\S+Z ERROR relay claim failed; retrying event=relay:error during=claim error="the outbox tables are missing in schema \\"cli_outage\\" .*run: outbox migrate --schema cli_outage"$/m,
    )
  })

  it('checks every option before connecting: one line, exit 2, secrets never echoed', async () => {
    const env = cliEnv({ DATABASE_URL: REFUSED_URL })
    const endpoint = ['--endpoint', 'http://127.0.0.1:9/hooks']
    const cases: [readonly string[], RegExp][] = [
      [
        ['relay', '--secret', `whsec_${'A'.repeat(40)}`],
        /--secret signs the --endpoint's requests, and no endpoint was given: stored subscriptions carry their own secrets/,
      ],
      [
        [...endpoint, '--subscription', '00000000-0000-4000-8000-000000000001'],
        /give --endpoint or --subscription, not both/,
      ],
      // A name is looked up once the database answers (see cli.subscriptions.test.ts); an empty list is refused now.
      [['relay', '--subscription', ','], /--subscription must be a non-empty array of subscription ids/],
      [['relay', '--endpoint', 'hooks.example.com'], /--endpoint is not a valid URL/],
      [['relay', '--endpoint', 'ftp://example.com/hooks'], /--endpoint must use http or https/],
      [
        [...endpoint, '--secret', 'whsec_not base64!'],
        /^outbox: signing secret: the part after "whsec_" is not valid base64/,
      ],
      [[...endpoint, '--secret', 'plain-s3cret'], /^outbox: signing secret must start with "whsec_"/],
      [
        [...endpoint, '--secret', SHORT_SECRET],
        /^outbox: signing secret is 16 bytes long; Standard Webhooks secrets need at least 24 random bytes: generate one with: echo "whsec_\$\(openssl rand -base64 32\)"$/,
      ],
      [
        [...endpoint, '--lease', '5000ms'],
        /--request-timeout \(10000\) \+ a 250 ms margin must be below --lease \(5000\)/,
      ],
      [[...endpoint, '--concurrency', 'many'], /--concurrency must be an integer from 1 to 1000, got "many"/],
      [[...endpoint, '--on-exhausted', 'retry'], /--on-exhausted must be one of skip, block; got "retry"/],
      [[...endpoint, '--log-format', 'xml'], /--log-format must be one of text, json/],
      [[...endpoint, '--log-level', 'loud'], /--log-level must be one of debug, info, warn, error/],
      [[...endpoint, '--retry-schedule', '5s,soon'], /--retry-schedule must be a duration .*"soon"/],
      [[...endpoint, '--listen=yes'], /--listen takes no value/],
      [[...endpoint, '--endpiont', 'x'], /unknown option --endpiont \(see outbox relay --help\)/],
    ]
    const results = await Promise.all(
      cases.map(([args]) => runCli(args[0] === 'relay' ? args : ['relay', ...args], env)),
    )
    results.forEach((result, index) => {
      const line = expectFailure(result, 2, cases[index]![1])
      expect(line).not.toContain('plain-s3cret')
      expect(line).not.toContain('not base64!')
      expect(line).not.toContain(SHORT_SECRET.slice(6))
    })
    const fromEnv = await runCli(
      ['relay'],
      cliEnv({
        DATABASE_URL: REFUSED_URL,
        OUTBOX_ENDPOINT: 'http://127.0.0.1:9/h',
        OUTBOX_SECRET: `${secret()},env-s3cret`,
      }),
    )
    const line = expectFailure(fromEnv, 2, /^outbox: signing secret #2 must start with "whsec_"/)
    expect(line).not.toContain('env-s3cret')
  })

  it('fails at start with exit 1 when the tables are missing, instead of retrying forever', async () => {
    const result = await runCli(
      ['relay', '--endpoint', 'http://127.0.0.1:9/hooks', '--schema', 'never_migrated'],
      cliEnv({ DATABASE_URL: t.url }),
    )
    expectFailure(
      result,
      1,
      /the outbox tables are missing in schema "never_migrated".*run: outbox migrate --schema never_migrated/,
    )
  })
})
