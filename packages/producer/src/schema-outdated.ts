import { OutboxError } from './errors.js'

/**
 * Runs a write that calls one of the schema's functions, turning "function (or column) does not exist" (a schema
 * migrated by an older version) into `ERR_OUTBOX_SCHEMA_OUTDATED`, whose message says to migrate; anything else is
 * rethrown as it is. Called by the `sql/*` modules that call a schema function, around that call, so no caller has
 * to remember it.
 */
export async function withCurrentSchema<T>(schema: string, write: () => Promise<T>): Promise<T> {
  try {
    return await write()
  } catch (error) {
    const { code, message } = error as { code?: unknown; message?: unknown }
    // 42883: a function this version calls is missing; 42703: a column it writes is (e.g. enqueueMany's
    // payload_bytes on a schema from before migration 0007).
    const missingFunction = code === '42883' && typeof message === 'string' && message.includes('outbox_')
    const missingColumn = code === '42703' && typeof message === 'string' && /relation "outbox/.test(message)
    if (missingFunction || missingColumn) {
      throw new OutboxError(
        'ERR_OUTBOX_SCHEMA_OUTDATED',
        `the outbox tables in schema "${schema}" are older than this @outbox/producer: run its migrations (\`outbox migrate\` or migrate(db))`,
        { cause: error },
      )
    }
    throw error
  }
}
