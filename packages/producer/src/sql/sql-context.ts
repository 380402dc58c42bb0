import type { Kysely, Transaction } from 'kysely'

/**
 * What every `sql/*` module runs against: the Kysely instance (or the caller's transaction, where the statement
 * must share it) and the schema the outbox tables live in. A relay passes its resolved options, which carry both,
 * so a call builds no context of its own.
 */
export interface SqlContext<DB extends Kysely<any> = Kysely<any>> {
  readonly db: DB
  readonly schema: string
}

/** A {@link SqlContext} whose statements must run in the caller's transaction. */
export type TransactionContext = SqlContext<Transaction<any>>
