import { migration0001 } from './0001-outbox.js'
import { migration0002 } from './0002-lane-claim-token.js'
import { migration0003 } from './0003-enqueue-function.js'
import { migration0004 } from './0004-claim-function.js'
import { migration0005 } from './0005-enqueue-inline.js'
import { migration0006 } from './0006-claim-hashed-busy.js'
import { migration0007 } from './0007-liveness.js'
import { migration0008 } from './0008-subscriptions.js'
import { migration0009 } from './0009-endpoint-health.js'
import { migration0010 } from './0010-delivery-log.js'
import { migration0011 } from './0011-audit.js'
import { migration0012 } from './0012-rate-limit.js'
import { migration0013 } from './0013-disabled-retention.js'
import { migration0014 } from './0014-backfill.js'
import { migration0015 } from './0015-trace-context.js'
import { migration0016 } from './0016-backfill-every-holder.js'
import { migration0017 } from './0017-single-subscription-claim.js'
import { migration0018 } from './0018-read-by-key.js'
import { migration0019 } from './0019-isolated-takeovers.js'
import { migration0020 } from './0020-revoke-public-execute.js'
import { migration0021 } from './0021-inline-type-match.js'

/** One migration of the producer schema: the name the migrator records, and its full SQL text. */
export interface ProducerMigration {
  /**
   * The name recorded in `outbox_producer_migration` (its file's name with `_` for `-`). Never renamed: a
   * migrated database would run the migration again under its new name.
   */
  readonly name: string
  /** The migration's whole SQL text for a schema (a name already checked as a lower-case identifier). */
  readonly sql: (schema: string) => string
}

/**
 * Every producer migration, in the order they run. Append only: a merged migration's file and entry are never
 * edited, reordered or renumbered (test/migrations.frozen.test.ts holds their hashes); a change is a new file.
 * A migration that creates a function (a new name or argument list) also revokes PUBLIC's EXECUTE on it, as 0020
 * did for those before it: PostgreSQL grants every role EXECUTE on a new function (test/roles.least-privilege.test.ts
 * fails otherwise); `producerGrantsSql` grants EXECUTE on every function of the schema, so it needs no change.
 */
export const producerMigrations: readonly ProducerMigration[] = [
  { name: '0001_outbox', sql: migration0001 },
  { name: '0002_lane_claim_token', sql: migration0002 },
  { name: '0003_enqueue_function', sql: migration0003 },
  { name: '0004_claim_function', sql: migration0004 },
  { name: '0005_enqueue_inline', sql: migration0005 },
  { name: '0006_claim_hashed_busy', sql: migration0006 },
  { name: '0007_liveness', sql: migration0007 },
  { name: '0008_subscriptions', sql: migration0008 },
  { name: '0009_endpoint_health', sql: migration0009 },
  { name: '0010_delivery_log', sql: migration0010 },
  { name: '0011_audit', sql: migration0011 },
  { name: '0012_rate_limit', sql: migration0012 },
  { name: '0013_disabled_retention', sql: migration0013 },
  { name: '0014_backfill', sql: migration0014 },
  { name: '0015_trace_context', sql: migration0015 },
  { name: '0016_backfill_every_holder', sql: migration0016 },
  { name: '0017_single_subscription_claim', sql: migration0017 },
  { name: '0018_read_by_key', sql: migration0018 },
  { name: '0019_isolated_takeovers', sql: migration0019 },
  { name: '0020_revoke_public_execute', sql: migration0020 },
  { name: '0021_inline_type_match', sql: migration0021 },
]
