import { useTestDatabase } from '@outbox/test-harness'
import { sql } from 'kysely'
import { describe, expect, it } from 'vitest'
import {
  createSubscription,
  deleteSubscription,
  disableSubscription,
  enableSubscription,
  enqueue,
  getSubscription,
  IMPLICIT_SUBSCRIPTION_ID,
  listSubscriptions,
  rotateSubscriptionSecret,
  updateSubscription,
} from '../src/index.js'

const t = useTestDatabase()
const SECRET = `whsec_${Buffer.alloc(32, 7).toString('base64')}`

async function secretsOf(id: string) {
  const { rows } = await sql<{ secret: string; expires_at: Date | null }>`
    SELECT secret, expires_at FROM outbox_subscription_secret WHERE subscription_id = ${id}::uuid
    ORDER BY id`.execute(t.db)
  return rows
}

describe('subscriptions', () => {
  it('creates with a generated secret returned once, and lists without secrets', async () => {
    const { id, secret } = await createSubscription(t.db, {
      url: 'https://acme.example/hooks',
      name: 'api-acme',
      tenant: 'acme',
      eventTypes: ['order.*', 'invoice.paid'],
      maxInFlight: 4,
      retrySchedule: [1000, 60_000],
      requestTimeoutMs: 5000,
      onExhausted: 'block',
    })
    expect(secret).toMatch(/^whsec_[A-Za-z0-9+/]{43}=$/)
    expect((await secretsOf(id)).map((row) => row.secret)).toEqual([secret])
    const listed = await listSubscriptions(t.db)
    expect(listed[0]).toMatchObject({
      id: IMPLICIT_SUBSCRIPTION_ID,
      name: 'default',
      implicit: true,
      url: null,
    })
    const mine = listed.find((subscription) => subscription.id === id)
    expect(mine).toMatchObject({
      name: 'api-acme',
      url: 'https://acme.example/hooks',
      tenant: 'acme',
      eventTypes: ['order.*', 'invoice.paid'],
      state: 'enabled',
      maxInFlight: 4,
      retrySchedule: [1000, 60_000],
      requestTimeoutMs: 5000,
      onExhausted: 'block',
      implicit: false,
      secretOverlapEnds: [],
    })
    expect(mine!.secretCreatedAt).toBeInstanceOf(Date)
    expect(JSON.stringify(listed)).not.toContain(secret.slice(6))
    expect(await getSubscription(t.db, 'api-acme')).toEqual(mine)
    expect(await getSubscription(t.db, id.toUpperCase())).toEqual(mine)
    expect(await listSubscriptions(t.db, { tenant: 'acme' })).toEqual([mine])
    expect(await getSubscription(t.db, 'nobody')).toBeUndefined()
  })

  it('refuses bad input with the option named, and stores nothing', async () => {
    const before = (await listSubscriptions(t.db)).length
    const cases: [Record<string, unknown>, string, RegExp][] = [
      [{}, 'url', /url is required/],
      [{ url: 'ftp://x/y' }, 'url', /must use http or https/],
      [{ url: 'https://x/h', secret: 'not-a-secret' }, 'secret', /whsec_/],
      [{ url: 'https://x/h', eventTypes: [] }, 'eventTypes', /omit it to receive every type/],
      [{ url: 'https://x/h', eventTypes: ['or*der'] }, 'eventTypes', /prefix ending in \*/],
      [{ url: 'https://x/h', maxInFlight: 0 }, 'maxInFlight', /integer from 1/],
      [{ url: 'https://x/h', retrySchedule: [-1] }, 'retrySchedule', /delays in whole milliseconds/],
      [{ url: 'https://x/h', onExhausted: 'drop' }, 'onExhausted', /'skip' or 'block'/],
      [{ url: 'https://x/h', ratePerSecond: 0 }, 'ratePerSecond', /requests per second from/],
      [{ url: 'https://x/h', startAt: 'later' }, 'startAt', /must be 'now' .* or 'earliest'/],
      [{ url: 'https://x/h', colour: 'red' }, 'colour', /unknown option colour/],
      [{ url: 'https://x/h', name: '00000000-0000-4000-8000-000000000000' }, 'name', /must not look like/],
    ]
    for (const [input, option, message] of cases) {
      await expect(createSubscription(t.db, input as never)).rejects.toMatchObject({
        code: 'ERR_OUTBOX_INVALID_OPTION',
        option,
        message: expect.stringMatching(message),
      })
    }
    await createSubscription(t.db, { url: 'https://x/h', name: 'api-taken', tenant: '*' })
    await expect(
      createSubscription(t.db, { url: 'https://y/h', name: 'api-taken', tenant: '*' }),
    ).rejects.toMatchObject({
      option: 'name',
      message: expect.stringMatching(/exists already/),
    })
    expect((await listSubscriptions(t.db)).length).toBe(before + 1)
  })

  it('updates settings, clears them with null, and refuses the implicit subscription', async () => {
    const { id } = await createSubscription(t.db, { url: 'https://x/h', name: 'api-upd', tenant: 't1' })
    // Other subscriptions here have a tenant: back to every tenant is said with '*', not null.
    const updated = await updateSubscription(t.db, 'api-upd', {
      url: 'https://y/h',
      tenant: '*',
      eventTypes: ['a.b'],
      maxInFlight: 2,
    })
    expect(updated).toMatchObject({
      id,
      url: 'https://y/h',
      tenant: null,
      eventTypes: ['a.b'],
      maxInFlight: 2,
    })
    expect(updated.updatedAt.getTime()).toBeGreaterThanOrEqual(updated.createdAt.getTime())
    await expect(updateSubscription(t.db, 'api-upd', {})).rejects.toMatchObject({ option: 'changes' })
    await expect(updateSubscription(t.db, 'api-upd', { url: null as never })).rejects.toMatchObject({
      option: 'url',
    })
    await expect(updateSubscription(t.db, 'default', { url: 'https://z/h' })).rejects.toMatchObject({
      message: expect.stringMatching(/configured on its relay/),
    })
    await expect(updateSubscription(t.db, 'missing', { maxInFlight: 1 })).rejects.toMatchObject({
      code: 'ERR_OUTBOX_SUBSCRIPTION_NOT_FOUND',
    })
  })

  it('rotates with an overlap: the old secret stays until it ends, then is dropped at the next rotation; 0 ends them all', async () => {
    const { id, secret: first } = await createSubscription(t.db, {
      url: 'https://x/h',
      name: 'api-rot',
      tenant: '*',
    })
    const { secret: second } = await rotateSubscriptionSecret(t.db, id, { overlapMs: 3_600_000 })
    expect(second).not.toBe(first)
    const rows = await secretsOf(id)
    expect(rows.map((row) => row.secret)).toEqual([first, second])
    expect(rows[0]!.expires_at!.getTime() - Date.now()).toBeGreaterThan(3_500_000)
    expect(rows[1]!.expires_at).toBeNull()
    expect((await getSubscription(t.db, id))!.secretOverlapEnds).toHaveLength(1)
    // Overlap 0: the previous secret ends now; the one whose overlap had ended is deleted at the next rotation.
    await rotateSubscriptionSecret(t.db, id, { overlapMs: 0, secret: SECRET })
    const { secret: last } = await rotateSubscriptionSecret(t.db, id, { overlapMs: 0 })
    const kept = await secretsOf(id)
    expect(kept.map((row) => row.secret)).not.toContain(second)
    const inForce = kept.filter((row) => row.expires_at === null || row.expires_at.getTime() > Date.now())
    // An overlap of 0 ends every earlier secret, the one still inside its hour included.
    expect(inForce.map((row) => row.secret)).toEqual([last])
    await expect(rotateSubscriptionSecret(t.db, id, { overlapMs: -1 })).rejects.toMatchObject({
      option: 'overlapMs',
    })
  })

  it('disabling keeps receiving events; enabling resumes; deleting removes only its own rows', async () => {
    const a = await createSubscription(t.db, { url: 'https://a/h', name: 'api-life-a', tenant: 'life' })
    const b = await createSubscription(t.db, { url: 'https://b/h', name: 'api-life-b', tenant: 'life' })
    const disabled = await disableSubscription(t.db, 'api-life-a', { reason: 'customer asked' })
    expect(disabled).toMatchObject({ state: 'disabled', disabledReason: 'customer asked' })
    expect(disabled.disabledAt).toBeInstanceOf(Date)
    await t.db.transaction().execute((trx) =>
      enqueue(trx, {
        aggregateType: 'life',
        aggregateId: '1',
        eventType: 'x',
        payload: {},
        tenant: 'life',
      }),
    )
    const count = async (id: string) =>
      Number(
        (
          await sql<{
            n: string
          }>`SELECT count(*) AS n FROM outbox WHERE subscription_id = ${id}::uuid`.execute(t.db)
        ).rows[0]!.n,
      )
    expect(await count(a.id)).toBe(1)
    expect(await count(b.id)).toBe(1)
    expect(await enableSubscription(t.db, a.id)).toMatchObject({
      state: 'enabled',
      disabledReason: null,
      disabledAt: null,
    })
    expect(await deleteSubscription(t.db, 'api-life-a')).toEqual({ deleted: 1, pendingDeleted: 1 })
    expect(await count(a.id)).toBe(0)
    expect(await count(b.id)).toBe(1)
    expect(await getSubscription(t.db, a.id)).toBeUndefined()
    await expect(deleteSubscription(t.db, 'default')).rejects.toMatchObject({
      message: expect.stringMatching(/disable it/),
    })
    await expect(deleteSubscription(t.db, a.id)).rejects.toMatchObject({
      code: 'ERR_OUTBOX_SUBSCRIPTION_NOT_FOUND',
    })
  })
})
