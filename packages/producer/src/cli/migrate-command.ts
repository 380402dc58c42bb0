import { type CliIo, writeLine } from './command.js'
import { loadProducer } from './load-producer.js'
import { resolveDatabase, withDatabase } from './open-database.js'
import { DATABASE_FLAGS, parseFlags } from './parse-flags.js'

/** `outbox migrate`: creates or updates the producer tables. Safe to run again and from several places at once. */
export async function migrateCommand(argv: readonly string[], io: CliIo): Promise<number> {
  const { values } = parseFlags('migrate', argv, DATABASE_FLAGS)
  const target = resolveDatabase(values, io.env)
  const { migrate } = await loadProducer()
  await withDatabase(target, { applicationName: 'outbox migrate', max: 2 }, (db) =>
    migrate(db, { schema: target.schema }),
  )
  writeLine(io.stdout, `producer tables in schema "${target.schema}" of ${target.database} are up to date`)
  return 0
}
