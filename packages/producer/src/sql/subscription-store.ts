import { type Kysely, sql } from 'kysely'
import type { StoredSettings } from '../subscription-input.js'
import type { SqlContext } from './sql-context.js'
import { checkTenantRule } from './tenant-rule.js'

/**
 * Runs last in a subscription change's own transaction, with what it did: where the caller records the change in the
 * audit log, so a row exists exactly when the change committed.
 */
export type InTransaction<T> = (trx: Kysely<any>, outcome: T) => Promise<void>

/** A subscription row as stored, with what is known of its secrets (never the secrets themselves). */
export interface SubscriptionRow {
  id: string
  name: string | null
  url: string | null
  tenant: string | null
  event_types: string[] | null
  state: 'enabled' | 'disabled'
  disabled_reason: string | null
  disabled_at: Date | null
  on_exhausted: 'skip' | 'block' | null
  max_in_flight: number | null
  rate_per_second: number | null
  retry_schedule: string[] | null
  request_timeout_ms: number | null
  created_at: Date
  updated_at: Date
  secret_created_at: Date | null
  /** When each previous secret, still signed with during its rotation overlap, stops being used. */
  overlap_ends: Date[] | null
  breaker_state: 'closed' | 'open'
  probing: boolean
  failure_streak: number
  breaker_opened_at: Date | null
  probe_at: Date | null
  throttled_until: Date | null
  dropped_deliveries: string
  last_dropped_at: Date | null
  backfill_state: 'running' | 'done' | null
  backfill_aggregates_done: string
  backfill_aggregates_total: string | null
  backfill_events: string
  backfill_started_at: Date | null
  backfill_finished_at: Date | null
  backfill_waiting_since: Date | null
}

const COLUMNS: Readonly<Record<keyof StoredSettings, string>> = {
  url: 'url',
  name: 'name',
  tenant: 'tenant',
  eventTypes: 'event_types',
  onExhausted: 'on_exhausted',
  maxInFlight: 'max_in_flight',
  ratePerSecond: 'rate_per_second',
  retrySchedule: 'retry_schedule',
  requestTimeoutMs: 'request_timeout_ms',
}

function value(key: keyof StoredSettings, setting: unknown) {
  if (setting === null) return sql`NULL`
  if (key === 'eventTypes') return sql`${setting}::text[]`
  if (key === 'retrySchedule') return sql`${(setting as number[]).map(String)}::bigint[]`
  return sql`${setting}`
}

/**
 * Makes the subscription's start a clean cut in every aggregate's stream: SHARE mode on the counter table waits
 * for every open transaction that has enqueued (each holds ROW EXCLUSIVE on it from its counter upsert) and holds
 * back every enqueue until this transaction commits. So each event is either committed before the change (and
 * follows the old routing) or takes its sequence after it (and reads the new one): no aggregate's events are split
 * around the change out of order, and no event committed after a subscription exists misses it.
 */
async function routingBarrier(trx: Kysely<any>, schema: string): Promise<void> {
  await sql`LOCK TABLE ${sql.id(schema, 'outbox_counter')} IN SHARE MODE`.execute(trx)
}

/**
 * Inserts a subscription and its first secret behind the routing barrier; returns its id. The secret is written as
 * `storedSecret` returns it for the new id (encrypted when keys are configured: the id is the ciphertext's associated
 * data, and it is known only once the row is inserted). With `backfill`, the row
 * starts with its backfill `'running'`, in the same transaction: the barrier's cut then splits every aggregate
 * exactly — what committed before is the backfill's to copy, what commits after is fanned out to it — and no relay
 * ever sees the subscription without its backfill state, so none claims its lanes before the copy is done.
 */
export async function insertSubscription(
  ctx: SqlContext,
  request: {
    readonly settings: StoredSettings
    readonly storedSecret: (id: string) => string
    readonly backfill: boolean
    /** Created without a tenant (rather than with `'*'`): refused once any stored subscription has one. */
    readonly implicitAllTenants?: boolean
    readonly beforeCommit?: InTransaction<string>
  },
): Promise<string> {
  const { db, schema } = ctx
  return await db.transaction().execute(async (trx) => {
    await routingBarrier(trx, schema)
    await checkTenantRule(trx, schema, { implicitAllTenants: request.implicitAllTenants === true })
    const keys = Object.keys(request.settings) as (keyof StoredSettings)[]
    const columns = keys.map((key) => sql.id(COLUMNS[key]))
    const values = keys.map((key) => value(key, request.settings[key]))
    if (request.backfill) {
      columns.push(sql.id('backfill_state'), sql.id('backfill_started_at'))
      values.push(sql`'running'`, sql`now()`)
    }
    const { rows } = await sql<{ id: string }>`
      INSERT INTO ${sql.id(schema, 'outbox_subscription')} (${sql.join(columns)})
      VALUES (${sql.join(values)})
      RETURNING id`.execute(trx)
    const id = rows[0]!.id
    await sql`
      INSERT INTO ${sql.id(schema, 'outbox_subscription_secret')} (subscription_id, secret)
      VALUES (${id}::uuid, ${request.storedSecret(id)})`.execute(trx)
    await request.beforeCommit?.(trx, id)
    return id
  })
}

/**
 * Subscriptions with their secrets' dates: one by id or name (`ref`), or all (optionally of one tenant), the
 * implicit one first, then by creation.
 */
export async function selectSubscriptions(
  ctx: SqlContext,
  request: { readonly id?: string; readonly name?: string; readonly tenant?: string },
): Promise<SubscriptionRow[]> {
  const { db, schema } = ctx
  const filters = [sql`TRUE`]
  if (request.id !== undefined) filters.push(sql`s.id = ${request.id}::uuid`)
  if (request.name !== undefined) filters.push(sql`s.name = ${request.name}`)
  if (request.tenant !== undefined) filters.push(sql`s.tenant = ${request.tenant}`)
  // Raw SQL: an aggregate over a filtered join of the secrets, which never leaves the database.
  const { rows } = await sql<SubscriptionRow>`
    SELECT s.id, s.name, s.url, s.tenant, s.event_types, s.state, s.disabled_reason, s.disabled_at, s.on_exhausted,
           s.max_in_flight, s.rate_per_second, s.retry_schedule, s.request_timeout_ms, s.created_at, s.updated_at,
           s.breaker_state, s.probe_token IS NOT NULL AND s.probe_at > now() AS probing, s.failure_streak,
           s.breaker_opened_at, s.probe_at, s.throttled_until, s.dropped_deliveries, s.last_dropped_at,
           s.breaker_opened_at, s.probe_at, s.throttled_until,
           s.backfill_state, s.backfill_aggregates_done, s.backfill_aggregates_total, s.backfill_events,
           s.backfill_started_at, s.backfill_finished_at, s.backfill_waiting_since,
           max(k.created_at) FILTER (WHERE k.expires_at IS NULL) AS secret_created_at,
           array_agg(k.expires_at ORDER BY k.expires_at) FILTER (WHERE k.expires_at IS NOT NULL) AS overlap_ends
    FROM ${sql.id(schema, 'outbox_subscription')} s
    LEFT JOIN ${sql.id(schema, 'outbox_subscription_secret')} k
      ON k.subscription_id = s.id AND (k.expires_at IS NULL OR k.expires_at > now())
    WHERE ${sql.join(filters, sql` AND `)}
    GROUP BY s.id
    ORDER BY s.id <> '00000000-0000-0000-0000-000000000000', s.created_at, s.id`.execute(db)
  return rows
}

/**
 * Changes a subscription's settings; a change of who receives what (tenant, event types) goes behind the routing
 * barrier. Returns false when no such subscription exists.
 */
export async function updateSubscriptionRow(
  ctx: SqlContext,
  request: {
    readonly id: string
    readonly settings: StoredSettings
    /** Its tenant cleared with null (rather than set to `'*'`): refused once another subscription has one. */
    readonly implicitAllTenants?: boolean
    readonly beforeCommit?: InTransaction<boolean>
  },
): Promise<boolean> {
  const { db, schema } = ctx
  const keys = Object.keys(request.settings) as (keyof StoredSettings)[]
  return await db.transaction().execute(async (trx) => {
    if (keys.includes('tenant') || keys.includes('eventTypes')) await routingBarrier(trx, schema)
    if (keys.includes('tenant')) {
      await checkTenantRule(trx, schema, {
        implicitAllTenants: request.implicitAllTenants === true,
        except: request.id,
      })
    }
    const result = await sql`
      UPDATE ${sql.id(schema, 'outbox_subscription')}
      SET ${sql.join(keys.map((key) => sql`${sql.id(COLUMNS[key])} = ${value(key, request.settings[key])}`))},
          updated_at = now()
      WHERE id = ${request.id}::uuid`.execute(trx)
    const updated = Number(result.numAffectedRows ?? 0) > 0
    if (updated) await request.beforeCommit?.(trx, updated)
    return updated
  })
}

/**
 * Enables or disables a subscription; enabling also resets its endpoint breaker and throttle (an operator's "try it
 * now"). Enabling the implicit one makes it receive events again, so it goes behind
 * the routing barrier (a stored one disabled kept receiving its rows). Returns false when it does not exist.
 */
export async function setSubscriptionState(
  ctx: SqlContext,
  request: {
    readonly id: string
    readonly enabled: boolean
    readonly reason: string | null
    readonly beforeCommit?: InTransaction<boolean>
  },
): Promise<boolean> {
  const { db, schema } = ctx
  return await db.transaction().execute(async (trx) => {
    if (request.enabled) await routingBarrier(trx, schema)
    const result = await sql`
      UPDATE ${sql.id(schema, 'outbox_subscription')}
      SET state = ${request.enabled ? 'enabled' : 'disabled'},
          disabled_reason = ${request.enabled ? null : request.reason},
          disabled_at = ${request.enabled ? sql`NULL` : sql`coalesce(disabled_at, now())`},
          ${
            request.enabled
              ? sql`breaker_state = 'closed', failure_streak = 0, streak_started_at = NULL, breaker_opened_at = NULL,
                    breaker_cooldown_ms = NULL, probe_at = NULL, probe_token = NULL, throttled_until = NULL,`
              : sql``
          }
          updated_at = now()
      WHERE id = ${request.id}::uuid`.execute(trx)
    const changed = Number(result.numAffectedRows ?? 0) > 0
    if (changed) await request.beforeCommit?.(trx, changed)
    return changed
  })
}

/**
 * Makes `secret` (as stored: plaintext or encrypted) the subscription's current secret; the previous ones stay in use for at most `overlapMs` more
 * (relays sign with each meanwhile), and secrets whose overlap has ended are deleted. Returns false when the
 * subscription does not exist.
 */
export async function rotateSecret(
  ctx: SqlContext,
  request: {
    readonly id: string
    readonly secret: string
    readonly overlapMs: number
    readonly beforeCommit?: InTransaction<boolean>
  },
): Promise<boolean> {
  const { db, schema } = ctx
  const secrets = sql.id(schema, 'outbox_subscription_secret')
  return await db.transaction().execute(async (trx) => {
    // The row lock orders two rotations of one subscription: each sees the other's new secret as the current one.
    const { rows } = await sql`
      SELECT 1 FROM ${sql.id(schema, 'outbox_subscription')} WHERE id = ${request.id}::uuid FOR UPDATE`.execute(
      trx,
    )
    if (rows.length === 0) return false
    await sql`
      DELETE FROM ${secrets} WHERE subscription_id = ${request.id}::uuid AND expires_at <= now()`.execute(trx)
    await sql`
      UPDATE ${secrets}
      SET expires_at = least(expires_at, now() + ${request.overlapMs} * interval '1 millisecond')
      WHERE subscription_id = ${request.id}::uuid`.execute(trx)
    await sql`
      INSERT INTO ${secrets} (subscription_id, secret) VALUES (${request.id}::uuid, ${request.secret})`.execute(
      trx,
    )
    await sql`
      UPDATE ${sql.id(schema, 'outbox_subscription')} SET updated_at = now() WHERE id = ${request.id}::uuid`.execute(
      trx,
    )
    await request.beforeCommit?.(trx, true)
    return true
  })
}

/**
 * Deletes a subscription with every row and lane of it (its secrets go by cascade). A relay holding one of its lanes
 * finds its marks fenced (the lane is gone) and moves on. Returns the rows deleted, or undefined when it does not
 * exist.
 */
export async function deleteSubscriptionRows(
  ctx: SqlContext,
  request: { readonly id: string; readonly beforeCommit?: InTransaction<{ pending: number; total: number }> },
): Promise<{ pending: number; total: number } | undefined> {
  const { db, schema } = ctx
  return await db.transaction().execute(async (trx) => {
    // An enqueue that read the subscription before the delete would otherwise add its row after it.
    await routingBarrier(trx, schema)
    const { rows } = await sql`
      DELETE FROM ${sql.id(schema, 'outbox_subscription')} WHERE id = ${request.id}::uuid RETURNING id`.execute(
      trx,
    )
    if (rows.length === 0) return undefined
    const { rows: counts } = await sql<{ pending: string; total: string }>`
      WITH gone AS (
        DELETE FROM ${sql.id(schema, 'outbox')} WHERE subscription_id = ${request.id}::uuid RETURNING status
      )
      SELECT count(*) FILTER (WHERE status = 'pending') AS pending, count(*) AS total FROM gone`.execute(trx)
    await sql`DELETE FROM ${sql.id(schema, 'outbox_lane')} WHERE subscription_id = ${request.id}::uuid`.execute(
      trx,
    )
    const deleted = { pending: Number(counts[0]!.pending), total: Number(counts[0]!.total) }
    await request.beforeCommit?.(trx, deleted)
    return deleted
  })
}

/**
 * Disables an enabled subscription whose endpoint answered `410 Gone`; returns false when it was not enabled (another
 * lane or relay got there first), so the transition is reported once.
 */
export async function disableGoneSubscription(
  ctx: SqlContext,
  request: { readonly id: string },
): Promise<boolean> {
  const { db, schema } = ctx
  const { rows } = await sql`
    UPDATE ${sql.id(schema, 'outbox_subscription')}
    SET state = 'disabled', disabled_reason = 'gone', disabled_at = now(), updated_at = now()
    WHERE id = ${request.id}::uuid AND state = 'enabled'
    RETURNING id`.execute(db)
  return rows.length > 0
}
