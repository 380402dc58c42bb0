import { describeFrozenMigrations } from '@outbox/test-harness/frozen-migrations'
import { consumerMigrations } from '../src/migrations/index.js'

/**
 * sha256 of each merged migration's text for the harness's fixed schema name. A change is a new migration, with its
 * own line here; editing a merged one fails with "migrations are frozen once merged".
 */
const FROZEN: Readonly<Record<string, string>> = {
  '0001_processed_events_and_cursors': '94fd4369385b87f4acc591aa70a444faddee3ea20e7f641b7b076800724582ac',
  '0002_record_event_function': '21617bdba378ee683640fd25d9bd9a6d819ceedf177911288e6d71bc1a83dc7c',
  '0003_source_keys': 'a91bb95f5015c0bef872619ea0abe0436cf7e9969197193000b038d05c8e4ecf',
  '0004_payload_digest': '4662411f53aca69186337ce701ee66186d51184d73affa8a5716d9c57f3eda44',
  '0005_record_event_statements': '06213568cb51683186ba1ee0257260d27a9feb67ac99c3001ab5bb49189bce8d',
}

describeFrozenMigrations(
  'consumer migrations',
  consumerMigrations,
  FROZEN,
  new URL('../src/migrations/', import.meta.url),
)
