import { startSink, useTestDatabase } from '@outbox/test-harness'
import { sql } from 'kysely'
import { Webhook } from 'standardwebhooks'
import { beforeAll, describe, expect, it } from 'vitest'
import { disableSubscription, enqueue, getSubscription, IMPLICIT_SUBSCRIPTION_ID } from '../src/index.js'
import { buildCli, cliEnv, expectFailure, runCli, startCli } from './cli-process.js'

const t = useTestDatabase()

beforeAll(() => {
  buildCli()
}, 120_000)

describe.concurrent('outbox subscriptions', () => {
  it('adds, shows, lists, updates, disables, enables, rotates and deletes, never printing a stored secret', async () => {
    const env = cliEnv({ DATABASE_URL: t.url })
    const added = await runCli(
      [
        'subscriptions',
        'create',
        '--url',
        'https://acme.example/hooks',
        '--name',
        'cli-acme',
        '--tenant',
        'acme',
        '--event-type',
        'order.*',
        '--event-type',
        'invoice.paid',
        '--max-in-flight',
        '4',
        '--rate',
        '0.5',
        '--retry-schedule',
        '5s,5m',
        '--json',
      ],
      env,
    )
    expect(added, added.stderr).toMatchObject({ code: 0 })
    const { id, secret } = JSON.parse(added.stdout)
    expect(secret).toMatch(/^whsec_/)
    expect(await getSubscription(t.db, id)).toMatchObject({
      name: 'cli-acme',
      tenant: 'acme',
      eventTypes: ['order.*', 'invoice.paid'],
      maxInFlight: 4,
      ratePerSecond: 0.5,
      retrySchedule: [5000, 300_000],
    })

    const shown = await runCli(['subscriptions', 'show', 'cli-acme'], env)
    expect(shown.stdout).toMatch(/^name +cli-acme$/m)
    expect(shown.stdout).toMatch(/^event types +order\.\*, invoice\.paid$/m)
    expect(shown.stdout).toMatch(/^rate +0\.5\/s$/m)
    const listed = await runCli(['subscriptions', 'list'], env)
    expect(listed.stdout).toMatch(/^ID +NAME +STATE +BREAKER +TENANT +EVENT TYPES +RATE +URL$/m)
    expect(listed.stdout).toContain(`${id}  cli-acme`)
    expect(listed.stdout).toMatch(/cli-acme .* 0\.5\/s +https:\/\/acme\.example\/hooks$/m)
    expect(listed.stdout).toMatch(new RegExp(`^${IMPLICIT_SUBSCRIPTION_ID} +default +enabled`, 'm'))

    const updated = await runCli(
      [
        'subscriptions',
        'update',
        id,
        '--url',
        'https://acme.example/v2',
        '--clear',
        'tenant',
        '--clear',
        'rate',
        '--json',
      ],
      env,
    )
    expect(JSON.parse(updated.stdout)).toMatchObject({
      url: 'https://acme.example/v2',
      tenant: null,
      ratePerSecond: null,
    })
    const rated = await runCli(['subscriptions', 'update', id, '--rate', '20', '--json'], env)
    expect(JSON.parse(rated.stdout)).toMatchObject({ ratePerSecond: 20 })

    const disabled = await runCli(['subscriptions', 'disable', 'cli-acme', '--reason', 'paused by ops'], env)
    expect(disabled.stdout.trim()).toBe('cli-acme is disabled')
    expect(await getSubscription(t.db, id)).toMatchObject({
      state: 'disabled',
      disabledReason: 'paused by ops',
    })
    expect((await runCli(['subscriptions', 'enable', 'cli-acme'], env)).stdout.trim()).toBe(
      'cli-acme is enabled',
    )

    const rotated = await runCli(
      ['subscriptions', 'rotate-secret', 'cli-acme', '--overlap', '1h', '--json'],
      env,
    )
    const { secret: fresh } = JSON.parse(rotated.stdout)
    expect(fresh).toMatch(/^whsec_/)
    expect(fresh).not.toBe(secret)
    for (const output of [shown, listed, updated, disabled].map((result) => result.stdout + result.stderr)) {
      expect(output).not.toContain(secret.slice(6, 20))
    }

    expectFailure(await runCli(['subscriptions', 'delete', 'cli-acme'], env), 2, /add --yes to confirm/)
    const deleted = await runCli(['subscriptions', 'delete', 'cli-acme', '--yes'], env)
    expect(deleted.stdout.trim()).toBe('deleted cli-acme: 0 event rows, 0 of them pending')
    expect(await getSubscription(t.db, id)).toBeUndefined()
  })

  it('masks URL tokens in list and show unless --show-urls, and warns about --secret on the command line', async () => {
    const env = cliEnv({ DATABASE_URL: t.url })
    const secret = `whsec_${Buffer.alloc(32, 7).toString('base64')}`
    const added = await runCli(
      [
        'subscriptions',
        'create',
        '--url',
        'https://hook:pw@mask.example/in?token=t0k3n',
        '--name',
        'cli-mask',
        '--all-tenants',
        '--secret',
        secret,
        '--actor',
        'bob',
      ],
      env,
    )
    expect(added, added.stderr).toMatchObject({ code: 0 })
    expect(added.stderr).toMatch(/--secret on the command line is shown by ps.*OUTBOX_SECRET/)
    for (const args of [['list'], ['show', 'cli-mask'], ['show', 'cli-mask', '--json']]) {
      const shown = await runCli(['subscriptions', ...args], env)
      expect(shown.stdout).toContain('https://***@mask.example/in?token=***')
      expect(shown.stdout).not.toContain('t0k3n')
    }
    const full = await runCli(['subscriptions', 'show', 'cli-mask', '--show-urls'], env)
    expect(full.stdout).toContain('https://hook:pw@mask.example/in?token=t0k3n')
  })

  it('rotate-secret warns about --secret on the command line as create does, and not about OUTBOX_SECRET', async () => {
    const env = cliEnv({ DATABASE_URL: t.url })
    const added = await runCli(
      [
        'subscriptions',
        'create',
        '--url',
        'https://rotate.example/hooks',
        '--name',
        'cli-rotate',
        '--all-tenants',
      ],
      env,
    )
    expect(added, added.stderr).toMatchObject({ code: 0 })
    expect(added.stderr).not.toMatch(/--secret on the command line/)

    const typed = `whsec_${Buffer.alloc(32, 8).toString('base64')}`
    const onArgv = await runCli(
      ['subscriptions', 'rotate-secret', 'cli-rotate', '--overlap', '1h', '--secret', typed, '--json'],
      env,
    )
    expect(onArgv, onArgv.stderr).toMatchObject({ code: 0 })
    expect(JSON.parse(onArgv.stdout)).toEqual({ secret: typed })
    expect(onArgv.stderr).toMatch(/--secret on the command line is shown by ps.*OUTBOX_SECRET/)

    const fromEnv = `whsec_${Buffer.alloc(32, 9).toString('base64')}`
    const inEnv = await runCli(
      ['subscriptions', 'rotate-secret', 'cli-rotate', '--overlap', '1h', '--json'],
      cliEnv({ DATABASE_URL: t.url, OUTBOX_SECRET: fromEnv }),
    )
    expect(inEnv, inEnv.stderr).toMatchObject({ code: 0 })
    expect(JSON.parse(inEnv.stdout)).toEqual({ secret: fromEnv })
    expect(inEnv.stderr).not.toMatch(/--secret on the command line/)
  })

  it('adds with --start-at earliest and shows the backfill in show and list', async () => {
    const env = cliEnv({ DATABASE_URL: t.url })
    const added = await runCli(
      [
        'subscriptions',
        'create',
        '--url',
        'https://backfill.example/hooks',
        '--name',
        'cli-backfill',
        '--all-tenants',
        '--start-at',
        'earliest',
      ],
      env,
    )
    expect(added, added.stderr).toMatchObject({ code: 0 })
    expect(added.stderr).toMatch(/backfilling every retained event first/)
    expect((await getSubscription(t.db, 'cli-backfill'))?.backfill).toMatchObject({ state: 'running' })
    const shown = await runCli(['subscriptions', 'show', 'cli-backfill'], env)
    expect(shown.stdout).toMatch(
      /backfill\s+running since \S+ \(0 aggregates, 0 events copied\); delivers once done/,
    )
    const listed = await runCli(['subscriptions', 'list'], env)
    expect(listed.stdout).toMatch(/cli-backfill\s+enabled, backfilling 0\s/)
    const json = JSON.parse((await runCli(['subscriptions', 'show', 'cli-backfill', '--json'], env)).stdout)
    expect(json.backfill).toMatchObject({ state: 'running', aggregatesDone: 0, events: 0 })
    expect((await runCli(['subscriptions', 'delete', 'cli-backfill', '--yes'], env)).code).toBe(0)
  })

  it('refuses bad input naming the flag, and an unknown subscription, with nothing stored', async () => {
    const env = cliEnv({ DATABASE_URL: t.url })
    expectFailure(await runCli(['subscriptions', 'create'], env), 2, /create needs --url/)
    expectFailure(
      await runCli(['subscriptions', 'create', '--url', 'https://x/h', '--max-in-flight', 'lots'], env),
      2,
      /--max-in-flight must be an integer from 1/,
    )
    expectFailure(
      await runCli(['subscriptions', 'create', '--url', 'https://x/h', '--rate', 'fast'], env),
      2,
      /--rate must be a number of requests per second from 0\.001 to 10000 .*got "fast"/,
    )
    expectFailure(
      await runCli(['subscriptions', 'create', '--url', 'https://x/h', '--event-type', 'a*b'], env),
      2,
      /--event-type entries are an exact type or a prefix ending in \*/,
    )
    expectFailure(
      await runCli(['subscriptions', 'create', '--url', 'gopher://x'], env),
      2,
      /--url must use http or https/,
    )
    expectFailure(
      await runCli(['subscriptions', 'create', '--url', 'https://x/h', '--start-at', 'later'], env),
      2,
      /--start-at must be one of now, earliest; got "later"/,
    )
    expectFailure(await runCli(['subscriptions', 'show', 'nobody'], env), 2, /no subscription "nobody"/)
    expectFailure(await runCli(['subscriptions', 'disable', 'nobody'], env), 1, /no subscription "nobody"/)
    expectFailure(await runCli(['subscriptions', 'frobnicate'], env), 2, /unknown subcommand "frobnicate"/)
    // One verb, as the library's createSubscription: `add` is not kept as a second spelling.
    expectFailure(
      await runCli(['subscriptions', 'add', '--url', 'https://x/h'], env),
      2,
      /unknown subcommand "add": use outbox subscriptions create\|list/,
    )
    expectFailure(
      await runCli(['relay', '--subscription', 'nobody', '--poll-interval', '50ms'], env),
      2,
      /--subscription: no subscription "nobody"/,
    )
    // Nothing was stored by the refused adds (the other tests of this file name theirs).
    const { rows } = await sql<{ n: string }>`
      SELECT count(*) AS n FROM outbox_subscription WHERE url IN ('https://x/h', 'gopher://x')`.execute(t.db)
    expect(rows[0]!.n).toBe('0')
  })

  it('says at once, when created with a private URL, that relays need --allow-private-networks', async () => {
    const env = cliEnv({ DATABASE_URL: t.url })
    const loopback = await runCli(
      [
        'subscriptions',
        'create',
        '--url',
        'http://127.0.0.1:9/hooks',
        '--name',
        'cli-private',
        '--all-tenants',
        '--json',
      ],
      env,
    )
    expect(loopback.code, loopback.stderr).toBe(0)
    expect(loopback.stderr).toMatch(
      /^note: 127\.0\.0\.1 is not a public address: relays refuse to deliver to it unless started with --allow-private-networks$/m,
    )
    // --json stays one document on stdout.
    expect(JSON.parse(loopback.stdout).id).toMatch(/^[0-9a-f-]{36}$/)
    const named = await runCli(
      [
        'subscriptions',
        'create',
        '--url',
        'http://localhost:9/hooks',
        '--name',
        'cli-localhost',
        '--all-tenants',
      ],
      env,
    )
    expect(named.stderr).toMatch(/^note: localhost \((127\.0\.0\.1|::1)\) is not a public address/m)
    const public_ = await runCli(
      ['subscriptions', 'create', '--url', 'https://8.8.8.8/hooks', '--name', 'cli-public', '--all-tenants'],
      env,
    )
    expect(public_.code).toBe(0)
    expect(public_.stderr).not.toMatch(/allow-private-networks/)
  })

  it('outbox relay without --endpoint serves the stored subscriptions, signed with their own secrets', async ({
    onTestFinished,
  }) => {
    const schema = 'cli_stored'
    const env = cliEnv({ DATABASE_URL: t.url, OUTBOX_SCHEMA: schema })
    expect((await runCli(['migrate'], env)).code).toBe(0)
    const sink = await startSink()
    try {
      const added = await runCli(
        ['subscriptions', 'create', '--url', sink.url, '--name', 'cli-relay', '--json'],
        env,
      )
      const { secret } = JSON.parse(added.stdout)
      await disableSubscription(t.db, IMPLICIT_SUBSCRIPTION_ID, { schema })
      await t.db
        .transaction()
        .execute((trx) =>
          enqueue(
            trx,
            { aggregateType: 'order', aggregateId: 'c1', eventType: 'order.created', payload: {} },
            { schema },
          ),
        )
      // Loopback is refused by default: a stored subscription's URL is customer input.
      const relay = startCli(
        // By name, as every other subscription command takes it.
        [
          'relay',
          '--subscription',
          'cli-relay',
          '--log-format',
          'text',
          '--allow-private-networks',
          '--poll-interval',
          '50ms',
        ],
        env,
        {
          onTestFinished,
        },
      )
      await relay.waitFor(() => sink.requests.length === 1, 'the delivery')
      const request = sink.requests[0]!
      expect(() =>
        new Webhook(secret).verify(request.body, {
          'webhook-id': request.headers['webhook-id'] as string,
          'webhook-timestamp': request.headers['webhook-timestamp'] as string,
          'webhook-signature': request.headers['webhook-signature'] as string,
        }),
      ).not.toThrow()
      const result = await relay.stop('SIGTERM')
      expect(result.code).toBe(0)
      expect(result.stdout).toMatch(/relay started serving=cli-relay/)
      expect(result.stdout).not.toMatch(/unsigned/)
    } finally {
      await sink.close()
    }
  })
})
