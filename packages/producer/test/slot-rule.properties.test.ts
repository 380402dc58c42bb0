import fc from 'fast-check'
import { describe, expect, it } from 'vitest'
import {
  canStartAny,
  claimBudget,
  claimRooms,
  failingQuota,
  mayStart,
  pickNext,
  type SlotPicture,
  type SubscriptionLoad,
  shouldYield,
} from '../src/slot-rule.js'

/** A served subscription as the relay would report it. */
const load = (id: string) =>
  fc.record({
    id: fc.constant(id),
    active: fc.nat({ max: 20 }),
    held: fc.nat({ max: 40 }),
    busy: fc.boolean(),
    failing: fc.boolean(),
  })

/** Any picture of 1–12 subscriptions under 1–64 slots (counts as they may stand, not only as the rule leaves them). */
const picture: fc.Arbitrary<SlotPicture> = fc
  .tuple(fc.integer({ min: 1, max: 64 }), fc.integer({ min: 1, max: 12 }))
  .chain(([concurrency, count]) =>
    fc
      .tuple(...Array.from({ length: count }, (_, n) => load(`s${n}`)))
      .map((subscriptions) => ({ concurrency, subscriptions })),
  )

const totalActive = (p: SlotPicture) => p.subscriptions.reduce((sum, sub) => sum + sub.active, 0)
/** Requests of subscriptions in good standing beyond each one's first (rule 1's are their own). */
const healthyBeyondFirst = (p: SlotPicture) =>
  p.subscriptions.reduce((sum, sub) => sum + (sub.failing ? 0 : Math.max(0, sub.active - 1)), 0)
const failingActive = (p: SlotPicture) =>
  p.subscriptions.reduce((sum, sub) => sum + (sub.failing ? sub.active : 0), 0)

function change(p: SlotPicture, id: string, edit: (sub: SubscriptionLoad) => SubscriptionLoad): SlotPicture {
  return { ...p, subscriptions: p.subscriptions.map((sub) => (sub.id === id ? edit(sub) : sub)) }
}

/** One step a relay may take: start the lane the rule picks, end a request, or learn that an endpoint fails or heals. */
type Step =
  | { readonly kind: 'start'; readonly waiting: readonly number[] }
  | { readonly kind: 'finish'; readonly sub: number }
  | { readonly kind: 'health'; readonly sub: number; readonly failing: boolean }

const step: fc.Arbitrary<Step> = fc.oneof(
  fc.record({
    kind: fc.constant('start' as const),
    waiting: fc.array(fc.nat({ max: 11 }), { maxLength: 24 }),
  }),
  fc.record({ kind: fc.constant('finish' as const), sub: fc.nat({ max: 11 }) }),
  fc.record({ kind: fc.constant('health' as const), sub: fc.nat({ max: 11 }), failing: fc.boolean() }),
)

describe('the slot rule', () => {
  it('a subscription in good standing with nothing in flight may always start, whatever the others hold', () => {
    fc.assert(
      fc.property(picture, fc.nat(), (p, pick) => {
        const sub = p.subscriptions[pick % p.subscriptions.length]!
        const idle = change(p, sub.id, (s) => ({ ...s, active: 0, failing: false }))
        expect(mayStart(idle, sub.id)).toBe(
          p.subscriptions.length === 1 ? totalActive(idle) < p.concurrency : true,
        )
      }),
    )
  })

  it('one subscription alone has every slot and no more', () => {
    fc.assert(
      fc.property(fc.integer({ min: 1, max: 64 }), load('only'), (concurrency, sub) => {
        expect(mayStart({ concurrency, subscriptions: [sub] }, 'only')).toBe(sub.active < concurrency)
      }),
    )
  })

  it('through any run of starts, ends and health changes: a start beyond the shared slots is a first request, and a failing one never passes the quota', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 1, max: 32 }),
        fc.integer({ min: 2, max: 12 }),
        fc.array(step, { maxLength: 200 }),
        (concurrency, count, steps) => {
          let p: SlotPicture = {
            concurrency,
            subscriptions: Array.from({ length: count }, (_, n) => ({
              id: `s${n}`,
              active: 0,
              held: 0,
              busy: false,
              failing: false,
            })),
          }
          let healthChanged = false
          for (const s of steps) {
            if (s.kind === 'start') {
              const waiting = s.waiting.map((n) => `s${n % count}`)
              const index = pickNext(p, waiting)
              if (index < 0) {
                // Nothing may start: no waiting lane is allowed by the rule.
                for (const id of waiting) expect(mayStart(p, id)).toBe(false)
                continue
              }
              const id = waiting[index]!
              expect(mayStart(p, id)).toBe(true)
              const before = p.subscriptions.find((sub) => sub.id === id)!
              p = change(p, id, (sub) => ({ ...sub, active: sub.active + 1, held: sub.held + 1, busy: true }))
              if (before.failing) expect(failingActive(p)).toBeLessThanOrEqual(failingQuota(concurrency))
              // In good standing: within the shared slots beyond each one's first request, or its first request.
              else if (healthyBeyondFirst(p) > concurrency) expect(before.active).toBe(0)
              // Until a subscription's health changes, in flight stays within the slots plus one first request each.
              if (!healthChanged) expect(totalActive(p)).toBeLessThanOrEqual(concurrency + count)
            } else if (s.kind === 'finish') {
              p = change(p, `s${s.sub % count}`, (sub) => ({
                ...sub,
                active: Math.max(0, sub.active - 1),
                held: Math.max(0, sub.held - 1),
              }))
            } else {
              healthChanged = true
              p = change(p, `s${s.sub % count}`, (sub) => ({ ...sub, failing: s.failing }))
            }
          }
        },
      ),
    )
  })

  it('failing subscriptions with endless work beside one in good standing: they hold at most their quota, it gets the rest', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 1, max: 64 }),
        fc.integer({ min: 1, max: 64 }),
        (concurrency, failing) => {
          let p: SlotPicture = {
            concurrency,
            subscriptions: [
              ...Array.from({ length: failing }, (_, n) => ({
                id: `bad${n}`,
                active: 0,
                held: 0,
                busy: true,
                failing: true,
              })),
              { id: 'healthy', active: 0, held: 0, busy: true, failing: false },
            ],
          }
          // Every subscription always has lanes waiting, the failing ones first in the queue.
          const waiting = [...p.subscriptions.map((sub) => sub.id), ...p.subscriptions.map((sub) => sub.id)]
          for (let starts = 0; starts < 4 * concurrency + failing + 2; starts++) {
            const index = pickNext(p, waiting)
            if (index < 0) break
            p = change(p, waiting[index]!, (sub) => ({ ...sub, active: sub.active + 1 }))
          }
          const healthy = p.subscriptions.find((sub) => sub.id === 'healthy')!
          expect(failingActive(p)).toBeLessThanOrEqual(failingQuota(concurrency))
          expect(healthy.active).toBeGreaterThanOrEqual(Math.max(1, concurrency - failingQuota(concurrency)))
        },
      ),
    )
  })

  it('subscriptions in good standing each holding one lane in flight count together as one sharer: one with a backlog has half the slots', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 1, max: 64 }),
        fc.integer({ min: 1, max: 128 }),
        (concurrency, singles) => {
          let p: SlotPicture = {
            concurrency,
            subscriptions: [
              ...Array.from({ length: singles }, (_, n) => ({
                id: `one${n}`,
                active: 1,
                held: 1,
                busy: true,
                failing: false,
              })),
              { id: 'backlog', active: 0, held: 4 * concurrency, busy: true, failing: false },
            ],
          }
          const waiting = Array.from({ length: 2 * concurrency }, () => 'backlog')
          for (let starts = 0; starts < 2 * concurrency; starts++) {
            const index = pickNext(p, waiting)
            if (index < 0) break
            p = change(p, waiting[index]!, (sub) => ({ ...sub, active: sub.active + 1 }))
          }
          const backlog = p.subscriptions.find((sub) => sub.id === 'backlog')!
          // Half the slots: the ones holding one lane count together as one sharer, not one each.
          expect(backlog.active).toBe(Math.max(1, Math.ceil(concurrency / 2)))
          expect(totalActive(p)).toBeLessThanOrEqual(concurrency + singles)
        },
      ),
    )
  })

  it('something always starts when nothing is in flight and a lane waits', () => {
    fc.assert(
      fc.property(picture, fc.array(fc.nat({ max: 11 }), { minLength: 1, maxLength: 10 }), (p, picks) => {
        const quiet = { ...p, subscriptions: p.subscriptions.map((sub) => ({ ...sub, active: 0 })) }
        const waiting = picks.map((n) => `s${n % p.subscriptions.length}`)
        expect(pickNext(quiet, waiting)).toBeGreaterThanOrEqual(0)
      }),
    )
  })

  it('a lane hands its slot back only when it could not start again and another waiting lane could', () => {
    fc.assert(
      fc.property(picture, fc.nat(), fc.array(fc.nat({ max: 11 }), { maxLength: 10 }), (p, pick, picks) => {
        const sub = p.subscriptions[pick % p.subscriptions.length]!
        // The lane asking holds a slot of its own.
        const asking = change(p, sub.id, (s) => ({ ...s, active: Math.max(1, s.active) }))
        const waiting = picks.map((n) => `s${n % p.subscriptions.length}`)
        const freed = change(asking, sub.id, (s) => ({ ...s, active: s.active - 1 }))
        const expected =
          !mayStart(freed, sub.id) && waiting.some((id) => id !== sub.id && mayStart(freed, id))
        expect(shouldYield(asking, sub.id, waiting)).toBe(expected)
      }),
    )
  })

  it('claim room: the failing ones together hold at most twice their quota ahead; one alone has it all', () => {
    fc.assert(
      fc.property(picture, (p) => {
        const capacity = 2 * p.concurrency
        const rooms = claimRooms(p, capacity)
        expect(rooms.map((room) => room.id)).toEqual(p.subscriptions.map((sub) => sub.id))
        for (const room of rooms) expect(room.room).toBeGreaterThanOrEqual(0)
        if (p.subscriptions.length === 1) {
          expect(rooms[0]!.room).toBe(Math.max(0, capacity - p.subscriptions[0]!.held))
          return
        }
        const failing = p.subscriptions.filter((sub) => sub.failing)
        const failingRoom = rooms
          .filter((room) => failing.some((sub) => sub.id === room.id))
          .reduce((sum, room) => sum + room.room, 0)
        const failingHeld = failing.reduce((sum, sub) => sum + sub.held, 0)
        expect(failingRoom).toBeLessThanOrEqual(Math.max(0, 2 * failingQuota(p.concurrency) - failingHeld))
      }),
    )
  })

  it('claim room: the failing ones are refilled in batches, once they hold at most half their room, and then always', () => {
    fc.assert(
      fc.property(picture, (p) => {
        const failing = p.subscriptions.filter((sub) => sub.failing)
        if (p.subscriptions.length === 1 || failing.length === 0) return
        const capacity = 2 * p.concurrency
        const limit = Math.ceil((capacity * failingQuota(p.concurrency)) / p.concurrency)
        const failingHeld = failing.reduce((sum, sub) => sum + sub.held, 0)
        const failingRoom = claimRooms(p, capacity)
          .filter((room) => failing.some((sub) => sub.id === room.id))
          .reduce((sum, room) => sum + room.room, 0)
        if (failingHeld > Math.floor(limit / 2)) expect(failingRoom).toBe(0)
        // Liveness: with half their room free, the failing ones are offered some of it (each holding fewer than its
        // even part of it, at least one lane, may be offered the rest).
        else if (failing.some((sub) => sub.held < Math.max(1, Math.ceil(limit / failing.length))))
          expect(failingRoom).toBeGreaterThan(0)
      }),
    )
  })

  it('claim room: a subscription in good standing holding nothing is always offered room', () => {
    fc.assert(
      fc.property(picture, fc.nat(), (p, pick) => {
        const sub = p.subscriptions[pick % p.subscriptions.length]!
        const empty = change(p, sub.id, (s) => ({ ...s, held: 0, active: 0, failing: false }))
        const room = claimRooms(empty, 2 * p.concurrency).find((r) => r.id === sub.id)!
        expect(room.room).toBeGreaterThan(0)
      }),
    )
  })

  it('claim budget: lanes of failing subscriptions past their share, and each first lane, never use up the claim room', () => {
    fc.assert(
      fc.property(picture, fc.nat({ max: 500 }), (p, extraFailingLanes) => {
        const capacity = 2 * p.concurrency
        if (p.subscriptions.length === 1) {
          expect(claimBudget(p, capacity)).toBe(capacity - p.subscriptions[0]!.held)
          return
        }
        // However many more lanes the failing ones hold (requests under way when they turned failing), the budget
        // stays what the subscriptions in good standing leave.
        const swollen = {
          ...p,
          subscriptions: p.subscriptions.map((sub) =>
            sub.failing ? { ...sub, held: sub.held + extraFailingLanes } : sub,
          ),
        }
        const healthyCounted = p.subscriptions
          .filter((sub) => !sub.failing)
          .reduce((sum, sub) => sum + Math.max(0, sub.held - 1), 0)
        const failingLimit = Math.ceil((capacity * failingQuota(p.concurrency)) / p.concurrency)
        expect(claimBudget(swollen, capacity)).toBeGreaterThanOrEqual(
          capacity - healthyCounted - failingLimit,
        )
        // A subscription in good standing holding one lane each costs the budget nothing.
        const firsts = {
          ...p,
          subscriptions: p.subscriptions.map((sub) => ({ ...sub, failing: false, held: 1 })),
        }
        expect(claimBudget(firsts, capacity)).toBe(capacity)
      }),
    )
  })

  it('a slot is free when and only when some subscription may start', () => {
    fc.assert(
      fc.property(picture, (p) => {
        expect(canStartAny(p)).toBe(p.subscriptions.some((sub) => mayStart(p, sub.id)))
      }),
    )
  })
})
