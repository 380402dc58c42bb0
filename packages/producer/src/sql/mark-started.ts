import type { SqlContext } from './sql-context.js'

/**
 * Records that the owner of a watched lane is about to send its first request, fenced by the claim token; false
 * when the claim is no longer ours (then nothing may be sent).
 *
 * Why: a lane is watched once a claim of it expired without an outcome. If this claim dies too, the next takeover
 * finds `started_token` equal to the dead claim's token and charges the head one attempt — so an event that kills
 * every relay that sends it is dead-lettered after its attempts, while a lane that was only claimed (waiting in a
 * relay's ready queue when it died) is handed over free. Only watched lanes pay this write, once per claim.
 */
export async function markStarted(
  ctx: SqlContext,
  request: { readonly claimToken: string },
): Promise<boolean> {
  const { claimToken } = request
  const result = await ctx.db
    .withSchema(ctx.schema)
    .updateTable('outbox_lane')
    .set({ started_token: claimToken })
    .where('claim_token', '=', claimToken)
    .executeTakeFirst()
  return result.numUpdatedRows > 0n
}
