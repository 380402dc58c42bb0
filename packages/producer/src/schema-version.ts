import { sql } from 'kysely'
import { OutboxError } from './errors.js'
import { producerMigrations } from './migrations/index.js'
import { PRODUCER_MIGRATION_TABLE } from './schema.js'
import type { SqlContext } from './sql/sql-context.js'

const KNOWN = new Set(producerMigrations.map((migration) => migration.name))

/**
 * Refuses a schema migrated by a newer `@outbox/producer` than this one: a relay that ignored a newer migration's
 * rules (new routing, new lane states) would deliver to the wrong place or break an invariant it does not know. It
 * reads the migration table once; a schema applied from `producerMigrationSql` (no migration table) is not checked.
 * Throws `ERR_OUTBOX_SCHEMA_NEWER` naming the migrations this version does not know.
 */
export async function checkSchemaNotNewer(ctx: SqlContext): Promise<void> {
  const { db, schema } = ctx
  // Raw SQL: to_regclass answers NULL for a missing table instead of failing the statement.
  const { rows: table } = await sql<{ found: string | null }>`
    SELECT to_regclass(${`"${schema}"."${PRODUCER_MIGRATION_TABLE}"`})::text AS found`.execute(db)
  if (table[0]?.found == null) return
  const { rows } = await sql<{ name: string }>`
    SELECT name FROM ${sql.id(schema, PRODUCER_MIGRATION_TABLE)} ORDER BY name`.execute(db)
  const unknown = rows.map((row) => row.name).filter((name) => !KNOWN.has(name))
  if (unknown.length > 0) {
    throw new OutboxError(
      'ERR_OUTBOX_SCHEMA_NEWER',
      `the outbox schema in "${schema}" was migrated by a newer @outbox/producer (${unknown.join(', ')}): upgrade @outbox/producer here to that version`,
    )
  }
}
