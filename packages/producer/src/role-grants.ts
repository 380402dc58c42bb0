import { invalidOption } from './errors.js'
import { resolveSchema } from './schema-name.js'

/**
 * The runtime roles of a least-privilege deployment, by what each runs (see {@link producerGrantsSql}); the fourth,
 * the migration role, owns the objects and runs the grants.
 */
export interface ProducerRoles {
  /** The application's: runs `enqueue`/`enqueueMany` in its own transactions. @defaultValue 'outbox_app' */
  readonly app?: string
  /** The relay's (and `prune`'s): claims, delivers, marks, and reads the signing secrets. @defaultValue 'outbox_relay' */
  readonly relay?: string
  /**
   * The operators' (the console, `outbox stats|lanes|dead-letters|audit`): reads and acts on lanes and dead letters,
   * never reads a secret. @defaultValue 'outbox_console'
   */
  readonly console?: string
}

/** Options of {@link producerGrantsSql}. */
export interface ProducerGrantsOptions {
  /** Schema of the producer tables. @defaultValue 'public' */
  readonly schema?: string
  /** The role names. */
  readonly roles?: ProducerRoles
}

/** Default role names of {@link producerGrantsSql}. */
export const DEFAULT_PRODUCER_ROLES: Readonly<Required<ProducerRoles>> = Object.freeze({
  app: 'outbox_app',
  relay: 'outbox_relay',
  console: 'outbox_console',
})

const ROLE_NAME = /^[a-z_][a-z0-9_]{0,62}$/

/** The columns of `outbox_subscription_secret` every role may read: when each secret was set and ends, not the secret. */
const SECRET_DATES = 'id, subscription_id, created_at, expires_at'

/**
 * The `GRANT` statements that give each role of a least-privilege deployment what it needs, and no more: run them as
 * the migration role (the owner) after `migrate`, and again after every upgrade (they are idempotent; a new table
 * or function is not covered until they run). The roles must exist; their creation (LOGIN, passwords) is yours.
 *
 * - The migration role owns everything (it ran `migrate`); it is also the one that writes and re-encrypts secrets
 *   (`createSubscription`, `rotateSubscriptionSecret`, `reencryptSecrets`).
 * - The application's role can `enqueue`: the counter, the event rows, the subscriptions it routes by. It cannot
 *   read a secret, mark, claim or delete anything.
 * - The relay's role works the outbox (claims, marks, retries, dead letters, the delivery log, breakers, backfills,
 *   `prune`) and is the only runtime role that reads `outbox_subscription_secret.secret`.
 * - The console's role reads everything an operator looks at and acts on lanes and dead letters (redrive, skip,
 *   unblock, discard), with the secrets' dates but never the secrets (column privileges).
 *
 * The functions run with the caller's rights (none is `SECURITY DEFINER`), so EXECUTE lets a role run only what
 * its table privileges allow; migration 0020 took EXECUTE away from PUBLIC, so no other role of the cluster can.
 *
 * @example
 * ```ts
 * import { producerGrantsSql } from '@outbox/producer'
 * const grants = producerGrantsSql({ schema: 'outbox' })
 * // psql -v ON_ERROR_STOP=1 "$MIGRATOR_URL" <<< "$grants"
 * ```
 */
export function producerGrantsSql(options: ProducerGrantsOptions = {}): string {
  const schema = resolveSchema(options.schema)
  const roles = { ...DEFAULT_PRODUCER_ROLES, ...options.roles }
  for (const [kind, name] of Object.entries(roles)) {
    if (typeof name !== 'string' || !ROLE_NAME.test(name)) {
      throw invalidOption(
        `roles.${kind}`,
        name,
        (spell, got) =>
          `${spell(`roles.${kind}`)} must be a lower-case role name (letters, digits, _), got ${got}`,
      )
    }
  }
  const s = `"${schema}"`
  const { app, relay, console } = roles
  const t = (table: string) => `${s}.${table}`
  return `-- The runtime roles reach the schema, and every producer function (each runs with the caller's rights).
GRANT USAGE ON SCHEMA ${s} TO ${app}, ${relay}, ${console};
GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA ${s} TO ${app}, ${relay}, ${console};
GRANT SELECT ON ${t('outbox_producer_migration')} TO ${app}, ${relay}, ${console};

-- The application: enqueue (a counter row per aggregate, the event's rows and their lanes, routed by the
-- subscriptions).
GRANT SELECT, INSERT, UPDATE ON ${t('outbox_counter')} TO ${app};
GRANT SELECT, INSERT, UPDATE ON ${t('outbox')} TO ${app};
GRANT SELECT, INSERT ON ${t('outbox_lane')} TO ${app};
GRANT SELECT ON ${t('outbox_subscription')} TO ${app};

-- The relay: claims, marks, retries, dead letters, the delivery log, breakers, backfills, prune; reads secrets.
GRANT SELECT, INSERT, UPDATE, DELETE ON ${t('outbox')}, ${t('outbox_lane')}, ${t('outbox_delivery_attempt')}, ${t('outbox_audit')} TO ${relay};
GRANT SELECT, UPDATE ON ${t('outbox_counter')}, ${t('outbox_subscription')} TO ${relay};
GRANT SELECT ON ${t('outbox_subscription_secret')} TO ${relay};

-- The console and the operators' commands: read, redrive, skip, unblock, discard, audit; never a secret.
GRANT SELECT, UPDATE, DELETE ON ${t('outbox')}, ${t('outbox_lane')} TO ${console};
GRANT SELECT, UPDATE ON ${t('outbox_counter')} TO ${console};
GRANT SELECT, INSERT ON ${t('outbox_audit')} TO ${console};
GRANT SELECT ON ${t('outbox_subscription')}, ${t('outbox_delivery_attempt')} TO ${console};
GRANT SELECT (${SECRET_DATES}) ON ${t('outbox_subscription_secret')} TO ${console};
`
}
