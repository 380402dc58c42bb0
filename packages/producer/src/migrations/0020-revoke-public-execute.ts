/**
 * Migration 0020: PUBLIC may no longer execute the producer's functions. Self-contained and frozen once merged: a
 * later change is a new migration with its own full text.
 *
 * Why: PostgreSQL grants PUBLIC no access to a new table, but EXECUTE on every new function, so any role of the
 * cluster could call `outbox_enqueue` or a claim function here. They run with the caller's rights, so the caller's
 * table privileges still bound what it does, but a least-privilege deployment (the README's "Least privilege")
 * names who runs what: EXECUTE is granted to the application's, relay's and console's roles, and to nobody else.
 *
 * Only the producer's own functions, named here: a schema may hold the application's functions, an extension's or
 * the consumer's (`outbox_record_event`), whose privileges are not the producer's to change. Every overload of each
 * name is covered. A migration that creates a function (a new name or a new argument list; `CREATE OR REPLACE` of an
 * existing signature keeps its privileges) must revoke PUBLIC's EXECUTE on it too: `roles.least-privilege.test.ts`
 * fails on any producer function PUBLIC can execute. Default privileges are not altered: they belong to the
 * migrating role in every schema, the application's included.
 */
export function migration0020(schema: string): string {
  return `
DO $revoke$
DECLARE
  f regprocedure;
BEGIN
  FOR f IN
    SELECT p.oid::regprocedure FROM pg_proc p
    WHERE p.pronamespace = '"${schema}"'::regnamespace
      AND p.proname IN ('outbox_new_row_due', 'outbox_enqueue', 'outbox_claim_lanes', 'outbox_type_matches',
        'outbox_insert_deliveries', 'outbox_claim_subscription_lanes', 'outbox_backfill_batch',
        'outbox_claim_single_subscription_lanes')
  LOOP
    EXECUTE format('REVOKE EXECUTE ON FUNCTION %s FROM PUBLIC', f);
  END LOOP;
END
$revoke$;
`
}
