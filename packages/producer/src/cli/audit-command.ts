import type { AuditEntry } from '../index.js'
import { DEFAULT_LIST_LIMIT } from './cli-defaults.js'
import { type CliIo, writeLine } from './command.js'
import { formatTable, truncate } from './format-text.js'
import { loadProducer } from './load-producer.js'
import { resolveDatabase, withDatabase } from './open-database.js'
import { withFlagNames } from './option-flags.js'
import { DATABASE_FLAGS, integerFlag, parseFlags } from './parse-flags.js'

const DETAIL_COLUMN_WIDTH = 70

/** Target and result as one short line: `key=value` pairs, objects as compact JSON. */
function detail(entry: AuditEntry): string {
  const pairs = Object.entries({ ...entry.target, ...entry.result }).map(
    ([key, value]) => `${key}=${typeof value === 'string' ? value : JSON.stringify(value)}`,
  )
  return truncate(pairs.join(' '), DETAIL_COLUMN_WIDTH)
}

/** `outbox audit`: who unblocked, skipped, redrove, discarded or repaired what, newest first. */
export async function auditCommand(argv: readonly string[], io: CliIo): Promise<number> {
  const { values } = parseFlags('audit', argv, {
    ...DATABASE_FLAGS,
    limit: { type: 'string' },
    before: { type: 'string' },
    json: { type: 'boolean' },
  })
  const limit = integerFlag(values.limit, 'limit', 1, 10_000) ?? DEFAULT_LIST_LIMIT
  const target = resolveDatabase(values, io.env)
  const { listAudit } = await loadProducer()
  const entries = await withFlagNames(values, () =>
    withDatabase(target, { applicationName: 'outbox audit', max: 1 }, (db) =>
      listAudit(db, {
        limit,
        schema: target.schema,
        ...(values.before === undefined ? {} : { before: values.before }),
      }),
    ),
  )
  if (values.json) writeLine(io.stdout, JSON.stringify(entries, null, 2))
  else if (entries.length === 0) writeLine(io.stdout, 'no audit entries')
  else {
    const rows = entries.map((entry) => [
      entry.id,
      entry.at.toISOString(),
      entry.actor,
      entry.action,
      detail(entry),
    ])
    for (const line of formatTable([['ID', 'AT', 'ACTOR', 'ACTION', 'DETAIL'], ...rows])) {
      writeLine(io.stdout, line)
    }
  }
  const last = entries.at(-1)
  if (entries.length === limit && last) {
    writeLine(io.stderr, `more may follow: outbox audit --limit ${limit} --before ${last.id}`)
  }
  return 0
}
