import type { Kysely } from 'kysely'
import { type AuditAction, actorOption, auditHost, recordAudit } from './audit.js'
import { IMPLICIT_SUBSCRIPTION_ID } from './delivery-target.js'
import { invalidOption, OutboxError } from './errors.js'
import type { OnExhausted } from './options.js'
import { resolveSchema } from './schema-name.js'
import { sealSecret } from './secret-envelope.js'
import { resolveSecretKeys, type SecretKeyring, type SecretKeys } from './secret-keys.js'
import type { SqlContext } from './sql/sql-context.js'
import {
  deleteSubscriptionRows,
  type InTransaction,
  insertSubscription,
  rotateSecret,
  type SubscriptionRow,
  selectSubscriptions,
  setSubscriptionState,
  updateSubscriptionRow,
} from './sql/subscription-store.js'
import {
  type CreateSubscriptionInput,
  checkChanges,
  checkCreateInput,
  checkSecret,
  isSubscriptionId,
  type SubscriptionChanges,
} from './subscription-input.js'

export { IMPLICIT_SUBSCRIPTION_ID } from './delivery-target.js'
export type {
  CreateSubscriptionInput,
  StartAt,
  SubscriptionChanges,
  SubscriptionSettings,
} from './subscription-input.js'

/** Where the subscription tables are, and who asks: every change is recorded in the audit log under `actor`. */
export interface SubscriptionCallOptions {
  /** @defaultValue 'public' */
  readonly schema?: string
  /** Who makes the change, for the audit log (reads ignore it). @defaultValue 'api' */
  readonly actor?: string
}

/**
 * The audit hook of one subscription change: recorded in the change's own transaction, naming the subscription and
 * its endpoint's host — never its full URL (it may carry a token) nor a secret.
 */
function audited<T>(
  ctx: SqlContext,
  actor: string,
  action: AuditAction,
  target: Readonly<Record<string, unknown>>,
  result: (outcome: T) => Readonly<Record<string, unknown>> = () => ({}),
): InTransaction<T> {
  return async (trx, outcome) =>
    await recordAudit({ db: trx, schema: ctx.schema }, { actor, action, target, result: result(outcome) })
}

/** What the audit log says of a subscription: its id, name and endpoint host. */
function auditTarget(subscription: Pick<Subscription, 'id' | 'name' | 'url'>): Record<string, unknown> {
  return { subscription: subscription.id, name: subscription.name, host: auditHost(subscription.url) }
}

/** Options of the calls that write a secret: {@link createSubscription}, {@link rotateSubscriptionSecret}. */
export interface SecretWriteOptions extends SubscriptionCallOptions {
  /**
   * Keys to encrypt the secret with before it is stored (AES-256-GCM under the first key; see {@link SecretKeys}),
   * as the CLI reads them from `OUTBOX_SECRET_KEYS`. Relays then need them too (their `secretKeys` option).
   * @defaultValue none: the secret is stored in plaintext
   */
  readonly secretKeys?: SecretKeys
}

/** The secret as stored for subscription `id`: encrypted under the first key when keys are given. */
function storedSecret(keyring: SecretKeyring | undefined, id: string, secret: string): string {
  return keyring === undefined ? secret : sealSecret(keyring, id, secret)
}

/**
 * A subscription as listed: everything but its secrets, which are never read back (see {@link createSubscription}).
 * Unset limits are null: the serving relay's options apply.
 */
export interface Subscription {
  readonly id: string
  /** Null when created without one; `default` for the implicit subscription. */
  readonly name: string | null
  /** Null only for the implicit subscription, whose URL is the relay's `endpoint`. */
  readonly url: string | null
  readonly tenant: string | null
  readonly eventTypes: readonly string[] | null
  readonly state: 'enabled' | 'disabled'
  readonly disabledReason: string | null
  readonly disabledAt: Date | null
  readonly onExhausted: OnExhausted | null
  readonly maxInFlight: number | null
  /** Most requests per second to its endpoint across every relay; null for no rate. */
  readonly ratePerSecond: number | null
  readonly retrySchedule: readonly number[] | null
  readonly requestTimeoutMs: number | null
  /** True for the implicit subscription (the relay's `endpoint`). */
  readonly implicit: boolean
  /** When the current secret was set (null for the implicit subscription, signed with the relay's `secret`). */
  readonly secretCreatedAt: Date | null
  /** When each previous secret still signed with during a rotation overlap stops being used. */
  readonly secretOverlapEnds: readonly Date[]
  readonly createdAt: Date
  readonly updatedAt: Date
  /**
   * Pending deliveries `prune` dropped from it while it was disabled past the disabled retention, cumulative over its
   * life (enabling it does not reset it): events its endpoint never received.
   */
  readonly dropped: number
  /** When `prune` last dropped any; null if it never did. */
  readonly lastDroppedAt: Date | null
  /** The endpoint's health as the relays share it (see the relay's `endpointBreaker`). */
  readonly endpoint: EndpointHealth
  /** The copy of retained events of a subscription created with `startAt: 'earliest'`; null for any other. */
  readonly backfill: BackfillProgress | null
}

/**
 * How far the backfill of a subscription created with `startAt: 'earliest'` has gone. While it is `running` the
 * subscription delivers nothing (its events are kept, and those committed since it was created are recorded as
 * usual); once `done`, relays deliver everything, per aggregate in sequence order, within about two seconds.
 */
export interface BackfillProgress {
  readonly state: 'running' | 'done'
  /** Aggregates whose retained events are copied. */
  readonly aggregatesDone: number
  /**
   * The aggregates there were when the copy began (null before its first batch). Aggregates created since are
   * visited too, so `aggregatesDone` may end above it.
   */
  readonly aggregatesTotal: number | null
  /** Events copied so far. */
  readonly events: number
  readonly startedAt: Date
  readonly finishedAt: Date | null
  /**
   * Since when the copy has waited for a transaction holding an aggregate it reached (an `enqueue` left open): it
   * tries again, and moves on once that transaction ends. Null when it is not waiting.
   */
  readonly waitingSince: Date | null
}

/** A stored subscription's endpoint health, as every relay sees it. */
export interface EndpointHealth {
  /** `open`: no lane is claimed until a probe; `probing`: one relay is sending the probe now. */
  readonly breaker: 'closed' | 'open' | 'probing'
  /** Failed attempts in a row across its lanes (a 2xx resets it). */
  readonly failureStreak: number
  /** When the breaker last opened; null while closed. */
  readonly openedAt: Date | null
  /** When the next probe may go, while open. */
  readonly nextProbeAt: Date | null
  /** Until when a `Retry-After` from the endpoint holds all its lanes back; null when none is in force. */
  readonly throttledUntil: Date | null
}

/** The default rotation overlap: a day, so every subscriber can deploy its new secret before the old one ends. */
export const DEFAULT_SECRET_OVERLAP_MS = 24 * 3600_000

function toSubscription(row: SubscriptionRow): Subscription {
  return {
    id: row.id,
    name: row.name,
    url: row.url,
    tenant: row.tenant,
    eventTypes: row.event_types,
    state: row.state,
    disabledReason: row.disabled_reason,
    disabledAt: row.disabled_at,
    onExhausted: row.on_exhausted,
    maxInFlight: row.max_in_flight,
    ratePerSecond: row.rate_per_second,
    retrySchedule: row.retry_schedule?.map(Number) ?? null,
    requestTimeoutMs: row.request_timeout_ms,
    implicit: row.id === IMPLICIT_SUBSCRIPTION_ID,
    secretCreatedAt: row.secret_created_at,
    secretOverlapEnds: row.overlap_ends ?? [],
    createdAt: row.created_at,
    updatedAt: row.updated_at,
    dropped: Number(row.dropped_deliveries),
    lastDroppedAt: row.last_dropped_at,
    endpoint: {
      breaker: row.breaker_state === 'closed' ? 'closed' : row.probing ? 'probing' : 'open',
      failureStreak: row.failure_streak,
      openedAt: row.breaker_state === 'open' ? row.breaker_opened_at : null,
      nextProbeAt: row.breaker_state === 'open' ? row.probe_at : null,
      throttledUntil:
        row.throttled_until !== null && row.throttled_until.getTime() > Date.now()
          ? row.throttled_until
          : null,
    },
    backfill:
      row.backfill_state === null
        ? null
        : {
            state: row.backfill_state,
            aggregatesDone: Number(row.backfill_aggregates_done),
            aggregatesTotal:
              row.backfill_aggregates_total === null ? null : Number(row.backfill_aggregates_total),
            events: Number(row.backfill_events),
            startedAt: row.backfill_started_at ?? row.created_at,
            finishedAt: row.backfill_finished_at,
            waitingSince: row.backfill_waiting_since,
          },
  }
}

function context(db: Kysely<any>, options: SubscriptionCallOptions | undefined): SqlContext {
  return { db, schema: resolveSchema(options?.schema) }
}

function notFound(ref: string): OutboxError {
  return new OutboxError(
    'ERR_OUTBOX_SUBSCRIPTION_NOT_FOUND',
    `no subscription ${JSON.stringify(ref)} (give its id or name; see outbox subscriptions list)`,
  )
}

function checkRef(ref: unknown): string {
  if (typeof ref !== 'string' || ref.length === 0) {
    throw invalidOption(
      'subscription',
      ref,
      (spell, got) => `${spell('subscription')} must be an id or a name, got ${got}`,
    )
  }
  return ref
}

/** Finds a subscription by id or name; throws `ERR_OUTBOX_SUBSCRIPTION_NOT_FOUND` when none has it. */
async function find(ctx: SqlContext, ref: unknown): Promise<Subscription> {
  const checked = checkRef(ref)
  const [row] = await selectSubscriptions(
    ctx,
    isSubscriptionId(checked) ? { id: checked.toLowerCase() } : { name: checked },
  )
  if (!row) throw notFound(checked)
  return toSubscription(row)
}

/** Turns the database's refusal of a second subscription with one name into the caller's mistake. */
async function nameIsFree<T>(name: string | null | undefined, action: () => Promise<T>): Promise<T> {
  try {
    return await action()
  } catch (error) {
    if ((error as { code?: unknown }).code === '23505' && typeof name === 'string') {
      throw invalidOption(
        'name',
        name,
        (spell, got) => `a subscription named ${got} exists already: choose another ${spell('name')}`,
      )
    }
    throw error
  }
}

/**
 * Creates a subscription: from the moment this returns, every event committed that it wants (its tenant, its
 * event types) is delivered to `url`, per aggregate in order, signed with its own secret, with its own retries, dead
 * letters and limits, by any relay that serves stored subscriptions (`new Relay({ db })`, `outbox relay` without
 * `--endpoint`) within about two seconds.
 *
 * Secrets are stored in `outbox_subscription_secret`: a relay needs the secret itself to sign (HMAC), so it cannot
 * be hashed. With `secretKeys` it is stored encrypted (AES-256-GCM, the key outside the database); without, in
 * plaintext. Either way, guard that table like any credential: only the relay's database role needs to read it (see
 * the README's "Least privilege"). The secret is returned here once, and never by {@link listSubscriptions}.
 *
 * Creating takes the counter table in SHARE mode for an instant: it waits for open transactions that have
 * enqueued, and holds new enqueues back until it commits. That is what makes the start exact: an event committed
 * after this returns is never missed, whatever transactions were open when it began. (An enqueuing transaction at
 * REPEATABLE READ or SERIALIZABLE reads subscriptions as of its snapshot: one that took its snapshot before the
 * subscription committed routes by what it saw.)
 *
 * With `startAt: 'earliest'` it also receives, first, every retained event it wants: the relays copy them in
 * bounded batches (progress in {@link Subscription.backfill}, the `subscription:backfill` event), and deliver
 * nothing of it until the copy is done, so each aggregate still arrives in sequence order. An event is retained
 * while some subscription has a row of it (pending, sent or dead): one no subscription wanted when it was
 * committed, or one pruned, cannot be copied. Each aggregate is copied with the tenant and event types the
 * subscription has when its batch runs.
 *
 * @example
 * ```ts
 * import type { Kysely } from 'kysely'
 * import { createSubscription } from '@outbox/producer'
 * declare const db: Kysely<any>
 * const { id, secret } = await createSubscription(db, {
 *   url: 'https://acme.example/hooks',
 *   tenant: 'acme',
 *   eventTypes: ['order.*'],
 *   name: 'acme-orders',
 * })
 * // Hand `secret` to Acme once: their consumer verifies with it.
 * ```
 */
export async function createSubscription(
  db: Kysely<any>,
  input: CreateSubscriptionInput,
  options?: SecretWriteOptions,
): Promise<{ readonly id: string; readonly secret: string }> {
  const { settings, secret, startAt } = checkCreateInput(input)
  const keyring = resolveSecretKeys(options?.secretKeys)
  const actor = actorOption(options?.actor)
  const ctx = context(db, options)
  const id = await nameIsFree(settings.name, () =>
    insertSubscription(ctx, {
      settings,
      storedSecret: (id) => storedSecret(keyring, id, secret),
      backfill: startAt === 'earliest',
      implicitAllTenants: (input as { tenant?: unknown }).tenant === undefined,
      beforeCommit: async (trx, id) =>
        await audited<string>(ctx, actor, 'subscription.create', {
          subscription: id,
          name: settings.name ?? null,
          host: auditHost(settings.url),
          tenant: settings.tenant ?? null,
          eventTypes: settings.eventTypes ?? null,
          startAt,
        })(trx, id),
    }),
  )
  return { id, secret }
}

/**
 * Lists subscriptions, the implicit one first, then in creation order, optionally those of one `tenant`. Never
 * returns secrets.
 */
export async function listSubscriptions(
  db: Kysely<any>,
  options: SubscriptionCallOptions & { readonly tenant?: string } = {},
): Promise<Subscription[]> {
  const rows = await selectSubscriptions(
    context(db, options),
    options.tenant === undefined ? {} : { tenant: options.tenant },
  )
  return rows.map(toSubscription)
}

/** One subscription by id or name, or undefined. */
export async function getSubscription(
  db: Kysely<any>,
  ref: string,
  options?: SubscriptionCallOptions,
): Promise<Subscription | undefined> {
  try {
    return await find(context(db, options), ref)
  } catch (error) {
    if ((error as { code?: unknown }).code === 'ERR_OUTBOX_SUBSCRIPTION_NOT_FOUND') return undefined
    throw error
  }
}

/**
 * Changes a subscription's URL, name, filters or limits (`null` clears an optional one). A change of tenant or
 * event types takes effect exactly, as {@link createSubscription} starts: events committed after it returns follow
 * the new routing. Events already recorded for the subscription are delivered still; those it no longer wants are
 * not recorded any more. Relays pick every change up within about two seconds.
 */
export async function updateSubscription(
  db: Kysely<any>,
  ref: string,
  changes: SubscriptionChanges,
  options?: SubscriptionCallOptions,
): Promise<Subscription> {
  const ctx = context(db, options)
  const actor = actorOption(options?.actor)
  const settings = checkChanges(changes)
  const found = await find(ctx, ref)
  if (found.implicit) {
    throw invalidOption(
      'subscription',
      ref,
      () =>
        'the implicit subscription is configured on its relay (endpoint, secret and the relay options), not here',
    )
  }
  // What changed, as the audit log may keep it: the URL as its host only.
  const { url, ...rest } = settings
  const recorded = url === undefined ? rest : { ...rest, host: auditHost(url) }
  const updated = await nameIsFree(settings.name, () =>
    updateSubscriptionRow(ctx, {
      id: found.id,
      settings,
      implicitAllTenants: (changes as { tenant?: unknown }).tenant === null,
      beforeCommit: audited(ctx, actor, 'subscription.update', auditTarget(found), () => ({
        changed: recorded,
      })),
    }),
  )
  if (!updated) throw notFound(ref)
  return await find(ctx, found.id)
}

/**
 * Gives a subscription a new secret and returns it (given, or generated). The previous secret stays in use for
 * `overlapMs` (@defaultValue a day): meanwhile every request carries a signature for each, so the subscriber can
 * switch to the new secret at any point of the overlap without rejecting a webhook. An overlap of 0 ends every
 * previous secret now (a leaked secret); a rotation never extends an earlier rotation's overlap. With `secretKeys`,
 * the new secret is stored encrypted (the previous ones stay as they are: `reencryptSecrets` converts them).
 */
export async function rotateSubscriptionSecret(
  db: Kysely<any>,
  ref: string,
  options: SecretWriteOptions & { readonly overlapMs?: number; readonly secret?: string } = {},
): Promise<{ readonly secret: string }> {
  const overlapMs = options.overlapMs ?? DEFAULT_SECRET_OVERLAP_MS
  if (!Number.isSafeInteger(overlapMs) || overlapMs < 0 || overlapMs > 30 * 24 * 3600_000) {
    throw invalidOption(
      'overlapMs',
      options.overlapMs,
      (spell, got) => `${spell('overlapMs')} must be whole milliseconds from 0 to 30 days, got ${got}`,
    )
  }
  const secret = checkSecret(options.secret)
  const keyring = resolveSecretKeys(options.secretKeys)
  const actor = actorOption(options.actor)
  const ctx = context(db, options)
  const found = await find(ctx, ref)
  if (found.implicit) {
    throw invalidOption(
      'subscription',
      ref,
      () => "the implicit subscription is signed with its relay's secret option",
    )
  }
  const stored = storedSecret(keyring, found.id, secret)
  const beforeCommit = audited<boolean>(ctx, actor, 'subscription.rotate-secret', auditTarget(found), () => ({
    overlapMs,
  }))
  if (!(await rotateSecret(ctx, { id: found.id, secret: stored, overlapMs, beforeCommit })))
    throw notFound(ref)
  return { secret }
}

/**
 * Pauses a subscription: relays stop claiming its lanes (within about two seconds; a request in flight finishes),
 * and it keeps receiving its events, delivered in order once it is enabled. It keeps them until then, unless the
 * operator runs `prune({ disabledRetention })`: past that retention, prune drops the oldest of each lane (counted in
 * `dropped` and audited), so `stats` and `outbox doctor` warn about what a disabled subscription holds: enable or
 * delete it.
 * The implicit subscription disabled stops receiving events (for deployments that serve stored subscriptions only).
 */
export async function disableSubscription(
  db: Kysely<any>,
  ref: string,
  options: SubscriptionCallOptions & { readonly reason?: string } = {},
): Promise<Subscription> {
  if (options.reason !== undefined && (typeof options.reason !== 'string' || options.reason.length > 500)) {
    throw invalidOption(
      'reason',
      options.reason,
      (spell) => `${spell('reason')} must be a string of at most 500 characters`,
    )
  }
  const ctx = context(db, options)
  const actor = actorOption(options.actor)
  const found = await find(ctx, ref)
  const reason = options.reason ?? 'disabled'
  const beforeCommit = audited<boolean>(ctx, actor, 'subscription.disable', auditTarget(found), () => ({
    reason,
  }))
  if (!(await setSubscriptionState(ctx, { id: found.id, enabled: false, reason, beforeCommit }))) {
    throw notFound(ref)
  }
  return await find(ctx, found.id)
}

/**
 * Resumes a disabled subscription: relays claim its lanes again, oldest events first. It also closes the endpoint's
 * breaker and lifts a `Retry-After` throttle, on an enabled subscription too: the operator's "try it now".
 */
export async function enableSubscription(
  db: Kysely<any>,
  ref: string,
  options?: SubscriptionCallOptions,
): Promise<Subscription> {
  const ctx = context(db, options)
  const actor = actorOption(options?.actor)
  const found = await find(ctx, ref)
  const beforeCommit = audited<boolean>(ctx, actor, 'subscription.enable', auditTarget(found))
  if (!(await setSubscriptionState(ctx, { id: found.id, enabled: true, reason: null, beforeCommit })))
    throw notFound(ref)
  return await find(ctx, found.id)
}

/**
 * Deletes a subscription with its secrets and every event recorded for it, pending or not (other subscriptions'
 * deliveries of the same events are untouched). Returns how many rows went, and how many of them were pending. The
 * implicit subscription cannot be deleted: disable it.
 */
export async function deleteSubscription(
  db: Kysely<any>,
  ref: string,
  options?: SubscriptionCallOptions,
): Promise<{ readonly deleted: number; readonly pendingDeleted: number }> {
  const ctx = context(db, options)
  const found = await find(ctx, ref)
  if (found.implicit) {
    throw invalidOption(
      'subscription',
      ref,
      () => 'the implicit subscription cannot be deleted: disable it instead',
    )
  }
  const actor = actorOption(options?.actor)
  const beforeCommit = audited<{ pending: number; total: number }>(
    ctx,
    actor,
    'subscription.delete',
    auditTarget(found),
    (deleted) => ({ deleted: deleted.total, pendingDeleted: deleted.pending }),
  )
  const result = await deleteSubscriptionRows(ctx, { id: found.id, beforeCommit })
  if (!result) throw notFound(ref)
  return { deleted: result.total, pendingDeleted: result.pending }
}
