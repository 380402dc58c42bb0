import type { Kysely } from 'kysely'
import { invalidOption } from './errors.js'
import { pageLimit } from './keyset-cursor.js'
import { resolveSchema } from './schema-name.js'
import type { SqlContext } from './sql/sql-context.js'

/** What an operator did: the actions the audit log records. */
export type AuditAction =
  | 'lane.unblock'
  | 'lane.skip-head'
  | 'dead-letters.redrive'
  | 'dead-letters.discard'
  | 'integrity.repair'
  | 'subscription.drop-pending'
  | 'subscription.create'
  | 'subscription.update'
  | 'subscription.disable'
  | 'subscription.enable'
  | 'subscription.delete'
  | 'subscription.rotate-secret'
  | 'events.replay'

/** One row of the audit log: who did what to which target, when, and with what result. */
export interface AuditEntry {
  readonly id: string
  readonly at: Date
  /** The console's `authorize` result, `'token'`, the CLI's `--actor` or the OS user. */
  readonly actor: string
  readonly action: AuditAction
  /** What was asked: the lane, the filter, the event ids. */
  readonly target: Readonly<Record<string, unknown>>
  /** What happened: counts, outcomes, or why it was refused. */
  readonly result: Readonly<Record<string, unknown>>
}

/**
 * A URL as the audit log may keep it: its host only. A subscriber's URL may carry a token in its user-info or query,
 * and the audit log is read by more people than the subscription table.
 */
export function auditHost(url: string | null | undefined): string | null {
  if (url === null || url === undefined) return null
  try {
    return new URL(url).host
  } catch {
    return null
  }
}

/** The actor an action is recorded under when its caller names none. */
export const DEFAULT_ACTOR = 'api'

/** Checks an `actor` option: a non-empty string of at most 200 characters. */
export function actorOption(actor: unknown): string {
  if (actor === undefined) return DEFAULT_ACTOR
  if (typeof actor !== 'string' || actor.trim() === '' || actor.length > 200) {
    throw invalidOption(
      'actor',
      actor,
      (name, got) => `${name('actor')} must be a non-empty name of at most 200 characters, got ${got}`,
    )
  }
  return actor
}

/**
 * Records an action in the audit log. Call it in the action's own transaction, so a row exists exactly when the
 * action committed.
 */
export async function recordAudit(
  ctx: SqlContext,
  entry: {
    readonly actor: string
    readonly action: AuditAction
    readonly target: Readonly<Record<string, unknown>>
    readonly result: Readonly<Record<string, unknown>>
  },
): Promise<void> {
  await ctx.db
    .withSchema(ctx.schema)
    .insertInto('outbox_audit')
    .values({
      actor: entry.actor,
      action: entry.action,
      target: JSON.stringify(entry.target),
      result: JSON.stringify(entry.result),
    })
    .execute()
}

/** Options of {@link listAudit}. */
export interface ListAuditOptions {
  /** Page size. @defaultValue 100 */
  readonly limit?: number
  /** The `id` of the last entry of the previous page: the next page holds older entries. */
  readonly before?: string
  /** @defaultValue 'public' */
  readonly schema?: string
}

/**
 * Lists the audit log, newest first: every unblock, skip, redrive, discard and repair an operator made through the
 * API, the CLI or the console, and every drop of a disabled subscription's pending deliveries by `prune` (run with a
 * `disabledRetention`), with its actor, target and result.
 *
 * @example
 * ```ts
 * import type { Kysely } from 'kysely'
 * import { listAudit } from '@outbox/producer'
 * declare const db: Kysely<any>
 * for (const entry of await listAudit(db, { limit: 20 })) console.log(entry.at, entry.actor, entry.action)
 * ```
 */
export async function listAudit(db: Kysely<any>, options: ListAuditOptions = {}): Promise<AuditEntry[]> {
  const limit = pageLimit(options.limit)
  const { before } = options
  if (before !== undefined && (typeof before !== 'string' || !/^\d{1,19}$/.test(before))) {
    throw invalidOption(
      'before',
      before,
      (name, got) => `${name('before')} must be the id of a listed entry, got ${got}`,
    )
  }
  let query = db
    .withSchema(resolveSchema(options.schema))
    .selectFrom('outbox_audit')
    .select(['id', 'at', 'actor', 'action', 'target', 'result'])
    .orderBy('id', 'desc')
    .limit(limit)
  if (before !== undefined) query = query.where('id', '<', before)
  const rows = await query.execute()
  return rows.map((row) => ({
    id: String(row.id),
    at: row.at,
    actor: row.actor,
    action: row.action as AuditAction,
    target: row.target as Record<string, unknown>,
    result: row.result as Record<string, unknown>,
  }))
}
