import { migration0001 } from './0001-processed-events-and-cursors.js'
import { migration0002 } from './0002-record-event-function.js'
import { migration0003 } from './0003-source-keys.js'
import { migration0004 } from './0004-payload-digest.js'
import { migration0005 } from './0005-record-event-statements.js'

/** One migration of the consumer schema: the name the migrator records, and its full SQL text. */
export interface ConsumerMigration {
  /**
   * The name recorded in `outbox_consumer_migration` (its file's name with `_` for `-`). Never renamed: a
   * migrated database would run the migration again under its new name.
   */
  readonly name: string
  /** The migration's whole SQL text for a schema (its name as given), or for the search_path (`undefined`). */
  readonly sql: (schema: string | undefined) => string
}

/**
 * Every consumer migration, in the order they run. Append only: a merged migration's file and entry are never
 * edited, reordered or renumbered (test/migrations.frozen.test.ts holds their hashes); a change is a new file.
 */
export const consumerMigrations: readonly ConsumerMigration[] = [
  { name: '0001_processed_events_and_cursors', sql: migration0001 },
  { name: '0002_record_event_function', sql: migration0002 },
  { name: '0003_source_keys', sql: migration0003 },
  { name: '0004_payload_digest', sql: migration0004 },
  { name: '0005_record_event_statements', sql: migration0005 },
]
