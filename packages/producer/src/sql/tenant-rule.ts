import { type Kysely, sql } from 'kysely'
import { invalidOption } from '../errors.js'

/**
 * Enforces the explicit-tenant rule in a transaction that changes who a subscription receives from: once any stored
 * subscription has a tenant, a subscription with none (every tenant's events) must be asked for by name, `'*'`, so
 * one field left out of a customer's form cannot leak every tenant's data.
 *
 * The routing barrier's SHARE lock does not conflict with itself, so two subscription changes pass it together:
 * without more, a create with no tenant and a create with one, both before the other commits, would each see no
 * tenant stored. A transaction-scoped advisory lock, taken by every create and tenant change (whether or not it needs
 * the check), orders them; the check's statement runs after the lock is granted and so, at READ COMMITTED, sees
 * whatever the other committed.
 */
export async function checkTenantRule(
  trx: Kysely<any>,
  schema: string,
  request: { readonly implicitAllTenants: boolean; readonly except?: string },
): Promise<void> {
  await sql`SELECT pg_advisory_xact_lock(hashtext(${`${schema}.outbox_subscription.tenant`}))`.execute(trx)
  if (!request.implicitAllTenants) return
  const { rows } = await sql<{ tenant: string }>`
    SELECT tenant FROM ${sql.id(schema, 'outbox_subscription')}
    WHERE tenant IS NOT NULL ${request.except === undefined ? sql`` : sql`AND id <> ${request.except}::uuid`}
    LIMIT 1`.execute(trx)
  if (rows.length > 0) {
    throw invalidOption(
      'tenant',
      undefined,
      (spell) =>
        `subscriptions here have a tenant, and one without ${spell('tenant')} would receive every tenant's events: give ${spell('tenant')}: '<tenant>', or ${spell('tenant')}: '*' (CLI --all-tenants) if it is meant for every tenant`,
    )
  }
}
