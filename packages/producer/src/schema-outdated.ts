import { OutboxError } from './errors.js'

/**
 * Runs a write that calls one of the schema's functions, turning "function does not exist" (a schema migrated by
 * an older version) into `ERR_OUTBOX_SCHEMA_OUTDATED`, whose message says to migrate; anything else is rethrown
 * as it is.
 */
export async function withCurrentSchema<T>(schema: string, write: () => Promise<T>): Promise<T> {
  try {
    return await write()
  } catch (error) {
    const { code, message } = error as { code?: unknown; message?: unknown }
    if (code === '42883' && typeof message === 'string' && message.includes('outbox_')) {
      throw new OutboxError(
        'ERR_OUTBOX_SCHEMA_OUTDATED',
        `the outbox tables in schema "${schema}" are older than this @outbox/producer: run its migrations (\`outbox migrate\` or migrate(db))`,
        { cause: error },
      )
    }
    throw error
  }
}
