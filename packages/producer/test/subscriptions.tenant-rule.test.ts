import { useTestDatabase } from '@outbox/test-harness'
import { Kysely, PostgresDialect, sql } from 'kysely'
import pg from 'pg'
import { afterAll, describe, expect, it } from 'vitest'
import {
  createSubscription,
  deleteSubscription,
  disableSubscription,
  enableSubscription,
  enqueue,
  getSubscription,
  listAudit,
  Relay,
  replay,
  rotateSubscriptionSecret,
  silentLogger,
  updateSubscription,
} from '../src/index.js'
import { maskUrl } from '../src/mask-url.js'

const t = useTestDatabase()
const pools: pg.Pool[] = []

/** A Kysely instance on its own pool: a second real connection, as another process would have. */
function connection(): Kysely<any> {
  const pool = new pg.Pool({ connectionString: t.url, max: 1 })
  pools.push(pool)
  return new Kysely<any>({ dialect: new PostgresDialect({ pool }) })
}

afterAll(async () => {
  await Promise.all(pools.map((pool) => pool.end()))
})

/** Waits for `check` with a generous ceiling, and fails rather than going on without it. */
async function waitUntil(check: () => Promise<boolean>, what: string): Promise<void> {
  const giveUp = Date.now() + 60_000
  while (!(await check())) {
    if (Date.now() > giveUp) throw new Error(`gave up waiting for ${what}`)
    await new Promise((resolve) => setTimeout(resolve, 25))
  }
}

/**
 * Sessions of THIS database waiting for a lock of the kind given. pg_locks is the whole cluster's: other test files
 * run beside this one, each in a database of its own, and their waits must not count here.
 */
async function waiting(kind: 'advisory' | 'relation'): Promise<boolean> {
  const { rows } = await sql<{ n: string }>`
    SELECT count(*) AS n FROM pg_locks
    WHERE NOT granted AND locktype = ${kind}
      AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`.execute(t.db)
  return Number(rows[0]!.n) > 0
}

describe('the explicit-tenant rule', () => {
  it('keeps the old behaviour while no subscription has a tenant, then asks for tenant "*" by name', async () => {
    const open = await createSubscription(t.db, { url: 'https://internal.example/a', name: 'internal-a' })
    const acme = await createSubscription(t.db, {
      url: 'https://acme.example/hooks',
      name: 'acme',
      tenant: 'acme',
    })
    await expect(createSubscription(t.db, { url: 'https://forgot.example/hooks' })).rejects.toMatchObject({
      code: 'ERR_OUTBOX_INVALID_OPTION',
      option: 'tenant',
      message: expect.stringMatching(/every tenant's events.*'\*'.*--all-tenants/),
    })
    const all = await createSubscription(t.db, { url: 'https://internal.example/b', name: 'b', tenant: '*' })
    expect((await getSubscription(t.db, all.id))!.tenant).toBeNull()
    // Clearing a tenant back to "every tenant" must be said with '*' too.
    await expect(updateSubscription(t.db, open.id, { tenant: null })).rejects.toMatchObject({
      option: 'tenant',
    })
    expect((await updateSubscription(t.db, open.id, { tenant: '*' })).tenant).toBeNull()
    // An update that leaves the tenant alone is not asked about it.
    expect((await updateSubscription(t.db, open.id, { name: 'internal-a2' })).name).toBe('internal-a2')
    for (const id of [open.id, acme.id, all.id]) await deleteSubscription(t.db, id)
  })

  it('orders two concurrent creates: one without a tenant is refused while one with a tenant is uncommitted', async () => {
    const first = connection()
    const second = connection()
    // Holds the audit table, so the create with a tenant stops after inserting its row, uncommitted.
    const holder = new pg.Client({ connectionString: t.url })
    await holder.connect()
    try {
      await holder.query('BEGIN')
      await holder.query('LOCK TABLE outbox_audit IN EXCLUSIVE MODE')
      const withTenant = createSubscription(first, {
        url: 'https://globex.example/hooks',
        name: 'globex',
        tenant: 'globex',
      })
      await waitUntil(() => waiting('relation'), 'the create with a tenant to wait on the audit table')
      const without = createSubscription(second, { url: 'https://internal.example/c', name: 'c' }).then(
        () => 'created',
        (error: { option?: string }) => `refused (${error.option})`,
      )
      await waitUntil(() => waiting('advisory'), 'the create without a tenant to wait on the rule lock')
      await holder.query('COMMIT')
      const created = await withTenant
      expect(await without).toBe('refused (tenant)')
      await deleteSubscription(t.db, created.id)
    } finally {
      await holder.end()
      await Promise.all([first.destroy(), second.destroy()])
      pools.length = 0
    }
  })
})

describe('the audit log of subscription changes', () => {
  it('records create, update, disable, enable, rotate-secret, replay and delete under the actor, with hosts, never secrets or URL tokens', async () => {
    const actor = 'alice'
    const url = 'https://hook:pw@acme.example/in?token=t0k3n'
    const { id, secret } = await createSubscription(t.db, { url, name: 'audited', tenant: '*' }, { actor })
    await updateSubscription(t.db, id, { url: 'https://acme.example/v2?sig=abc', maxInFlight: 2 }, { actor })
    await disableSubscription(t.db, id, { actor, reason: 'maintenance' })
    await enableSubscription(t.db, id, { actor })
    const rotated = await rotateSubscriptionSecret(t.db, id, { actor })
    await replay(t.db, { subscriptionId: id, since: '1h', actor })
    await deleteSubscription(t.db, id, { actor })
    const entries = (await listAudit(t.db, { limit: 20 })).filter((entry) => entry.target.subscription === id)
    expect(entries.map((entry) => [entry.actor, entry.action]).reverse()).toEqual([
      [actor, 'subscription.create'],
      [actor, 'subscription.update'],
      [actor, 'subscription.disable'],
      [actor, 'subscription.enable'],
      [actor, 'subscription.rotate-secret'],
      [actor, 'events.replay'],
      [actor, 'subscription.delete'],
    ])
    expect(entries.at(-1)!.target).toMatchObject({ host: 'acme.example', name: 'audited' })
    const text = JSON.stringify(entries)
    for (const hidden of [secret, rotated.secret, 't0k3n', 'pw@', 'sig=abc'])
      expect(text).not.toContain(hidden)
  })
})

describe('masked URLs and connection strings', () => {
  it('relay.options shows no password of listen.connectionString, nor the endpoint URL’s user-info or query', async () => {
    const relay = new Relay({
      db: t.db,
      endpoint: 'https://hook:pw@acme.example/in?token=t0k3n',
      listen: { connectionString: 'postgres://relay:s3cret@db.internal:5432/app' },
      logger: silentLogger,
    })
    const shown = relay.options
    expect((shown.listen as { connectionString: string }).connectionString).toBe(
      'postgres://relay:***@db.internal:5432/app',
    )
    expect(JSON.stringify(shown)).not.toContain('s3cret')
    expect(shown.endpoint!({} as never)).toBe('https://***@acme.example/in?token=***')
    await relay.stop()
  })

  it('maskUrl keeps scheme, host and path, and masks user-info and every query value', () => {
    expect(maskUrl('https://acme.example/hooks')).toBe('https://acme.example/hooks')
    expect(maskUrl('https://u:p@acme.example:8443/in?a=1&b=2')).toBe(
      'https://***@acme.example:8443/in?a=***&b=***',
    )
  })
})

describe('enqueue still routes to every tenant’s subscription', () => {
  it('a subscription created with tenant "*" receives an event of any tenant', async () => {
    const all = await createSubscription(t.db, { url: 'https://internal.example/d', tenant: '*' })
    await t.db
      .transaction()
      .execute((trx) =>
        enqueue(trx, { aggregateType: 'o', aggregateId: '1', eventType: 'x', payload: {}, tenant: 'acme' }),
      )
    const { rows } = await sql<{ n: string }>`
      SELECT count(*) AS n FROM outbox WHERE subscription_id = ${all.id}::uuid`.execute(t.db)
    expect(Number(rows[0]!.n)).toBe(1)
    await deleteSubscription(t.db, all.id)
  })
})
