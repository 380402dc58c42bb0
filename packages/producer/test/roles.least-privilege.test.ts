import { randomBytes } from 'node:crypto'
import { readFileSync } from 'node:fs'
import { type Sink, startSink, useTestDatabase } from '@outbox/test-harness'
import { Kysely, PostgresDialect, sql } from 'kysely'
import pg from 'pg'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import {
  checkIntegrity,
  createSubscription,
  disableSubscription,
  discardDeadLetters,
  enqueue,
  IMPLICIT_SUBSCRIPTION_ID,
  listAudit,
  listDeadLetters,
  listDeliveryAttempts,
  listLanes,
  listSubscriptions,
  migrate,
  producerGrantsSql,
  prune,
  Relay,
  redrive,
  repairIntegrity,
  silentLogger,
  skipLaneHead,
  stats,
} from '../src/index.js'

import { waitFor } from './support.js'

const t = useTestDatabase()

// Roles are cluster-wide and test files share a server: each run gets its own names, dropped afterwards.
const suffix = randomBytes(4).toString('hex')
const ROLES = {
  migrator: `outbox_migrator_${suffix}`,
  app: `outbox_app_${suffix}`,
  relay: `outbox_relay_${suffix}`,
  console: `outbox_console_${suffix}`,
  /** A role of the cluster the outbox never granted anything: what PUBLIC may do, it may do. */
  stranger: `outbox_stranger_${suffix}`,
}
const SCHEMA = 'outbox_roles'

const opened: Kysely<any>[] = []

/**
 * A Kysely instance whose every connection acts as `role`: `SET ROLE` is queued on each new connection before any
 * query of the pool's users (pg runs a client's queries in order), so privileges are checked as that role's.
 */
function connectAs(role: string): Kysely<any> {
  const pool = new pg.Pool({ connectionString: t.url, max: 4 })
  pool.on('error', () => {})
  pool.on('connect', (client) => {
    client.on('error', () => {})
    void client.query(`SET ROLE ${role}`)
  })
  const db = new Kysely<any>({ dialect: new PostgresDialect({ pool }) })
  opened.push(db)
  return db
}

/** Whether running `statement` as `db` is refused for want of a privilege (SQLSTATE 42501). */
async function refused(db: Kysely<any>, statement: string): Promise<string | undefined> {
  try {
    await sql.raw(statement).execute(db)
    return undefined
  } catch (error) {
    expect(error).toMatchObject({ code: '42501' })
    return (error as Error).message
  }
}

let as: Record<'migrator' | 'app' | 'relay' | 'console' | 'stranger', Kysely<any>>
let sink: Sink

beforeAll(async () => {
  for (const role of Object.values(ROLES)) await sql.raw(`CREATE ROLE ${role} NOLOGIN`).execute(t.db)
  // What a DBA does once: the migration role may create the schema (and owns what it creates in it).
  await sql.raw(`GRANT CREATE ON DATABASE "${t.url.split('/').pop()}" TO ${ROLES.migrator}`).execute(t.db)
  as = {
    migrator: connectAs(ROLES.migrator),
    app: connectAs(ROLES.app),
    relay: connectAs(ROLES.relay),
    console: connectAs(ROLES.console),
    stranger: connectAs(ROLES.stranger),
  }
  await migrate(as.migrator, { schema: SCHEMA })
  await sql.raw(producerGrantsSql({ schema: SCHEMA, roles: ROLES })).execute(as.migrator)
  await disableSubscription(as.migrator, IMPLICIT_SUBSCRIPTION_ID, { schema: SCHEMA })
  sink = await startSink((request) =>
    request.json.type === 'order.rejected' ? { status: 422, body: 'no' } : { status: 200 },
  )
}, 120_000)

afterAll(async () => {
  await sink?.close()
  await Promise.allSettled(opened.map((db) => db.destroy()))
  // The roles own the schema's objects and hold grants in this database: both go before the roles can.
  await sql.raw(`DROP SCHEMA IF EXISTS ${SCHEMA} CASCADE`).execute(t.db)
  for (const role of Object.values(ROLES)) {
    await sql.raw(`DROP OWNED BY ${role}`).execute(t.db)
    await sql.raw(`DROP ROLE ${role}`).execute(t.db)
  }
})

async function enqueueAs(db: Kysely<any>, aggregateId: string, eventType = 'order.created') {
  return await db
    .transaction()
    .execute((trx) =>
      enqueue(
        trx,
        { aggregateType: 'order', aggregateId, eventType, payload: { aggregateId } },
        { schema: SCHEMA },
      ),
    )
}

describe("the README's grants", () => {
  it("are producerGrantsSql({ schema: 'outbox' }), word for word", () => {
    const readme = readFileSync(new URL('../README.md', import.meta.url), 'utf8')
    const marker = "<!-- producerGrantsSql({ schema: 'outbox' }) -->\n```sql\n"
    const start = readme.indexOf(marker)
    expect(start, 'the README lost its grants block').toBeGreaterThan(0)
    const block = readme.slice(start + marker.length, readme.indexOf('```', start + marker.length))
    expect(block).toBe(producerGrantsSql({ schema: 'outbox' }))
  })
})

describe.sequential('least privilege: four roles, each able to do its job and refused the rest', () => {
  it('the migration role owns every producer table and function', async () => {
    const { rows } = await sql<{ name: string; owner: string }>`
      SELECT c.relname AS name, pg_get_userbyid(c.relowner) AS owner FROM pg_class c
      WHERE c.relnamespace = ${SCHEMA}::regnamespace AND c.relkind = 'r'
      UNION ALL
      SELECT p.proname, pg_get_userbyid(p.proowner) FROM pg_proc p WHERE p.pronamespace = ${SCHEMA}::regnamespace`.execute(
      t.db,
    )
    expect(rows.length).toBeGreaterThan(10)
    expect(rows.filter((row) => row.owner !== ROLES.migrator)).toEqual([])
  })

  it('PUBLIC cannot execute any producer function: a role granted nothing is refused', async () => {
    // USAGE on the schema, as the public schema gives every role: what is refused below is the function itself.
    await sql.raw(`GRANT USAGE ON SCHEMA ${SCHEMA} TO ${ROLES.stranger}`).execute(as.migrator)
    const { rows } = await sql<{ signature: string }>`
      SELECT p.oid::regprocedure::text AS signature FROM pg_proc p
      WHERE p.pronamespace = ${SCHEMA}::regnamespace AND has_function_privilege('public', p.oid, 'EXECUTE')`.execute(
      t.db,
    )
    expect(rows, 'a migration that creates a function must REVOKE EXECUTE … FROM PUBLIC on it').toEqual([])
    expect(await refused(as.stranger, `SELECT ${SCHEMA}.outbox_type_matches(NULL, 'order.created')`)).toMatch(
      /permission denied for function outbox_type_matches/,
    )
  })

  it('the application can enqueue, and cannot read a secret, mark, claim or delete', async () => {
    const subscription = await createSubscription(
      as.migrator,
      { url: sink.url, name: 'roles', retrySchedule: [] },
      { schema: SCHEMA },
    )
    const event = await enqueueAs(as.app, 'a1')
    expect(event.sequence).toBe(1)
    const { rows } = await sql`
      SELECT 1 FROM ${sql.id(SCHEMA, 'outbox')} WHERE subscription_id = ${subscription.id}::uuid`.execute(
      t.db,
    )
    expect(rows).toHaveLength(1)
    expect(await refused(as.app, `SELECT secret FROM ${SCHEMA}.outbox_subscription_secret`)).toMatch(
      /permission denied for table outbox_subscription_secret/,
    )
    expect(await refused(as.app, `SELECT created_at FROM ${SCHEMA}.outbox_subscription_secret`)).toBeDefined()
    expect(await refused(as.app, `DELETE FROM ${SCHEMA}.outbox`)).toBeDefined()
    expect(await refused(as.app, `UPDATE ${SCHEMA}.outbox_lane SET claim_token = NULL`)).toBeDefined()
    expect(
      await refused(as.app, `UPDATE ${SCHEMA}.outbox_subscription SET url = 'https://evil.example'`),
    ).toBeDefined()
  })

  it('the relay claims, signs (reading secrets), marks, dead-letters and prunes', async () => {
    await enqueueAs(as.app, 'a2', 'order.rejected')
    const relay = new Relay({
      db: as.relay,
      schema: SCHEMA,
      allowPrivateNetworks: true,
      logger: silentLogger,
      pollIntervalMs: 20,
    })
    await relay.start()
    try {
      await waitFor(() => sink.requests.length >= 2, 'the relay delivered both events')
      await waitFor(
        async () => (await stats(as.relay, { schema: SCHEMA })).dead === 1,
        'the rejected one dead',
      )
    } finally {
      await relay.stop()
    }
    expect(sink.requests.every((request) => typeof request.headers['webhook-signature'] === 'string')).toBe(
      true,
    )
    const { rows } = await sql<{ secret: string }>`
      SELECT secret FROM ${sql.id(SCHEMA, 'outbox_subscription_secret')}`.execute(as.relay)
    expect(rows[0]?.secret).toMatch(/^whsec_/)
    const pruned = await prune(as.relay, { retention: 0, schema: SCHEMA })
    expect(pruned.removed).toBe(1)
    expect(await refused(as.relay, `DELETE FROM ${SCHEMA}.outbox_subscription_secret`)).toBeDefined()
    expect(
      await refused(as.relay, `UPDATE ${SCHEMA}.outbox_subscription_secret SET secret = 'x'`),
    ).toBeDefined()
  })

  it('the console reads and acts (lists, stats, redrive, audit) and cannot read a secret', async () => {
    const listed = await listSubscriptions(as.console, { schema: SCHEMA })
    const mine = listed.find((subscription) => subscription.name === 'roles')
    expect(mine?.secretCreatedAt).toBeInstanceOf(Date)
    expect((await stats(as.console, { schema: SCHEMA })).dead).toBe(1)
    expect(await listLanes(as.console, { state: 'struggling', schema: SCHEMA })).toBeDefined()
    const [dead] = await listDeadLetters(as.console, { eventType: 'order.*', schema: SCHEMA })
    expect(dead).toMatchObject({ lastStatus: 422 })
    expect(
      await listDeliveryAttempts(as.console, { subscriptionId: mine!.id, schema: SCHEMA }),
    ).not.toHaveLength(0)
    const redriven = await redrive(as.console, { eventIds: [dead!.eventId], actor: 'ops', schema: SCHEMA })
    expect(redriven.redriven).toEqual([dead!.eventId])
    expect((await listAudit(as.console, { schema: SCHEMA }))[0]).toMatchObject({
      action: 'dead-letters.redrive',
    })
    // The redriven event heads its lane again: skip it (a dead letter once more), then discard that dead letter.
    const lane = { subscriptionId: mine!.id, aggregateType: 'order', aggregateId: 'a2', schema: SCHEMA }
    expect(await skipLaneHead(as.console, { ...lane, reason: 'ops' })).toMatchObject({
      eventId: dead!.eventId,
    })
    const discarded = await discardDeadLetters(as.console, { eventIds: [dead!.eventId], schema: SCHEMA })
    expect(discarded.discarded).toEqual([{ eventId: dead!.eventId, subscriptionId: mine!.id }])
    expect((await checkIntegrity(as.console, { schema: SCHEMA })).ok).toBe(true)
    expect(await repairIntegrity(as.console, { schema: SCHEMA })).toBeDefined()
    expect(await refused(as.console, `SELECT secret FROM ${SCHEMA}.outbox_subscription_secret`)).toMatch(
      /permission denied for table outbox_subscription_secret/,
    )
    expect(await refused(as.console, `SELECT * FROM ${SCHEMA}.outbox_subscription_secret`)).toBeDefined()
    expect(
      await refused(as.console, `UPDATE ${SCHEMA}.outbox_subscription_secret SET expires_at = now()`),
    ).toBeDefined()
  })
})
