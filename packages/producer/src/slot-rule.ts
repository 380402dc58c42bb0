/**
 * The slot rule: how a relay shares its delivery slots (`concurrency`) and its claim room between the subscriptions
 * it serves. Pure: it sees counts, never a lane, a clock or the database, so it is proven by property tests alone
 * and the relay only keeps the counts up to date.
 *
 * The rule, in words:
 * 1. **A subscription in good standing with nothing in flight may always start a request**, whatever the others
 *    hold, even when every shared slot is taken.
 * 2. **Failing subscriptions hold at most a quarter of the slots together** ({@link failingQuota}, at least one): a
 *    failing subscription starts a request only while all failing ones together have fewer in flight. Failing means
 *    its endpoint's last answer to this relay was a 5xx, 408, timeout or network error, or a request to it has gone
 *    unanswered for a while (`slowRequestMs` in the lane worker: a quarter of its timeout, at most 1 s), or its failure streak in PostgreSQL — written by
 *    every relay, so a restarted one knows too — is above zero. A 2xx puts it back in good standing.
 * 3. **The subscriptions in good standing share the rest**: `concurrency`, less the failing quota while a failing
 *    subscription is busy. One of them starts a request while they hold fewer than that together beyond each one's
 *    first request (rule 1's are their own), and it holds fewer than its even share of it — divided between the busy
 *    ones holding more than one lane, with one share kept for all the others (idle, or holding a single lane) while
 *    there are any. Those others ask for nothing beyond their first request now, so they count as one sharer, not one
 *    each: beside 64 subscriptions holding a lane each, one with a backlog has half the slots, not a sixty-fifth.
 *
 * So at any moment the subscriptions in good standing hold at most `concurrency` requests plus one first request
 * each, and the failing ones start none beyond their quota: in flight ≤ `concurrency` + the subscriptions served,
 * except for requests already under way when their subscription turned failing (each ends within its
 * `requestTimeoutMs`), which no longer count against the others' slots.
 *
 * A relay serving one subscription gives it every slot: there is no one to protect.
 */

/** What the slot rule knows of one served subscription. */
export interface SubscriptionLoad {
  readonly id: string
  /** Its lanes in delivery (each has at most one request in flight). */
  readonly active: number
  /** Its lanes held: claimed ahead and waiting, or in delivery. */
  readonly held: number
  /** It holds lanes, or held one a moment ago: it counts among those the slots are shared between. */
  readonly busy: boolean
  /** Its endpoint is known to fail or time out (rule 2). */
  readonly failing: boolean
}

/** The relay's slots and the load of every served subscription, in the order ties are broken. */
export interface SlotPicture {
  readonly concurrency: number
  readonly subscriptions: readonly SubscriptionLoad[]
}

/** How many slots the failing subscriptions may hold together: a quarter of `concurrency`, at least one. */
export function failingQuota(concurrency: number): number {
  return Math.max(1, Math.floor(concurrency / 4))
}

/** The counts every decision derives from, computed in one walk over the picture. */
interface Tally {
  readonly total: number
  /** Requests in flight of subscriptions in good standing beyond each one's first (rule 1's are their own). */
  readonly healthyBeyondFirst: number
  readonly failingActive: number
  /** The slots the subscriptions in good standing share (rule 3). */
  readonly healthySlots: number
  /** One subscription in good standing's even share of them. */
  readonly share: number
}

/**
 * Whether a subscription in good standing counts as a sharer of its own in rule 3: it is busy and holds more than one
 * lane. One holding a single lane asks for no more than its first request, which is its own (rule 1); the ones that do
 * not share count together as one sharer. Were each counted, 64 subscriptions holding one lane each would leave
 * another a sixty-fifth of the slots while taking none of them.
 */
function sharesSlots(sub: SubscriptionLoad): boolean {
  return sub.busy && sub.held > 1
}

function tally(picture: SlotPicture): Tally {
  const { concurrency, subscriptions } = picture
  let total = 0
  let healthyBeyondFirst = 0
  let failingActive = 0
  let sharing = 0
  let others = 0
  let busyFailing = false
  for (const sub of subscriptions) {
    total += sub.active
    if (sub.failing) {
      failingActive += sub.active
      if (sub.busy) busyFailing = true
    } else {
      healthyBeyondFirst += Math.max(0, sub.active - 1)
      if (sharesSlots(sub)) sharing += 1
      else others += 1
    }
  }
  const healthySlots = healthySlotsOf(concurrency, busyFailing)
  const sharers = Math.max(1, sharing + (others > 0 ? 1 : 0))
  return {
    total,
    healthyBeyondFirst,
    failingActive,
    healthySlots,
    share: Math.max(1, Math.ceil(healthySlots / sharers)),
  }
}

/** The slots the subscriptions in good standing share: all of them, less the failing quota while one is busy. */
function healthySlotsOf(concurrency: number, failingBusy: boolean): number {
  return failingBusy ? concurrency - failingQuota(concurrency) : concurrency
}

function find(picture: SlotPicture, id: string): SubscriptionLoad | undefined {
  return picture.subscriptions.find((sub) => sub.id === id)
}

function mayStartWith(picture: SlotPicture, counts: Tally, sub: SubscriptionLoad): boolean {
  const { concurrency, subscriptions } = picture
  if (subscriptions.length <= 1) return counts.total < concurrency
  if (sub.failing) return counts.failingActive < failingQuota(concurrency)
  return sub.active === 0 || (counts.healthyBeyondFirst < counts.healthySlots && sub.active < counts.share)
}

/** Whether a lane of subscription `id` may start a request now. False for a subscription the picture does not hold. */
export function mayStart(picture: SlotPicture, id: string): boolean {
  const sub = find(picture, id)
  return sub !== undefined && mayStartWith(picture, tally(picture), sub)
}

/**
 * Which waiting lane gets the next slot: the index in `waiting` (each lane named by its subscription's id, in the
 * order they wait) of the first lane whose subscription has nothing in flight and may start, else of the one whose
 * subscription has the fewest in flight and may start; -1 when none may start now. A lane of a subscription the
 * picture does not hold (no longer served) is picked at once: it sends nothing, it only hands itself back.
 */
export function pickNext(picture: SlotPicture, waiting: readonly string[]): number {
  const counts = tally(picture)
  let best = -1
  let bestActive = Number.POSITIVE_INFINITY
  const decided = new Map<string, boolean>()
  for (let index = 0; index < waiting.length; index++) {
    const id = waiting[index]!
    let allowed = decided.get(id)
    const sub = find(picture, id)
    if (!sub) return index
    if (allowed === undefined) {
      allowed = mayStartWith(picture, counts, sub)
      decided.set(id, allowed)
    }
    if (!allowed) continue
    if (sub.active === 0) return index
    if (sub.active < bestActive) {
      best = index
      bestActive = sub.active
    }
  }
  return best
}

/** The picture once one request of subscription `id` has ended (its lane gave its slot back). */
function withoutOne(picture: SlotPicture, id: string): SlotPicture {
  return {
    concurrency: picture.concurrency,
    subscriptions: picture.subscriptions.map((sub) =>
      sub.id === id ? { ...sub, active: Math.max(0, sub.active - 1) } : sub,
    ),
  }
}

/**
 * Whether a lane of subscription `id`, between two of its requests, should hand itself back: it could not start its
 * next request were it waiting (its subscription took slots while the others were idle, or turned failing), and a
 * lane of another subscription in `waiting` could start in the slot it frees. Handing back between requests bounds
 * the waiting lane's wait by one request, not by a whole batch.
 */
export function shouldYield(picture: SlotPicture, id: string, waiting: readonly string[]): boolean {
  const freed = withoutOne(picture, id)
  if (mayStart(freed, id)) return false
  return waiting.some((other) => other !== id && mayStart(freed, other))
}

/**
 * How many lanes each served subscription may be given by the next claim, out of `capacity` lanes held (claimed
 * ahead or in delivery). One subscription gets all of it. With several, each subscription in good standing may hold
 * an even share among the busy ones in good standing holding more than one lane (rule 3's sharers) of what the failing
 * ones' quota leaves (while any of them is busy), with one share kept for the others while there are any (a
 * subscription not sharing yet is counted as if it joined the sharers). The failing ones together hold at most twice
 * their slot quota (claimed ahead as the others are), handed out in the picture's order, so the caller rotates it, and
 * in batches: none while they hold more than half of it.
 */
export function claimRooms(picture: SlotPicture, capacity: number): { id: string; room: number }[] {
  const { subscriptions, concurrency } = picture
  if (subscriptions.length === 1) {
    const only = subscriptions[0]!
    return [{ id: only.id, room: Math.max(0, capacity - only.held) }]
  }
  let sharing = 0
  let healthy = 0
  let failingHeld = 0
  let failingCount = 0
  let failingBusy = false
  for (const sub of subscriptions) {
    if (sub.failing) {
      failingCount += 1
      failingHeld += sub.held
      if (sub.busy) failingBusy = true
    } else {
      healthy += 1
      if (sharesSlots(sub)) sharing += 1
    }
  }
  const failingLimit = Math.ceil((capacity * failingQuota(concurrency)) / concurrency)
  // Each failing subscription's part of that: an even split (at least one lane), so the first does not take it all.
  const failingEach = Math.max(1, Math.ceil(failingLimit / Math.max(1, failingCount)))
  // Refilled in batches: once the failing ones hold at most half their limit, then up to the limit. Offered room at
  // every lane they finish, each claim would carry them — a claim over many subscriptions costs several times one
  // over a single subscription — and a failing endpoint answering at once finishes lanes as fast as it gets them.
  let failingLeft = failingHeld > Math.floor(failingLimit / 2) ? 0 : Math.max(0, failingLimit - failingHeld)
  return subscriptions.map((sub) => {
    if (sub.failing) {
      const room = Math.max(0, Math.min(failingLeft, failingEach - sub.held))
      failingLeft -= room
      return { id: sub.id, room }
    }
    // A subscription not sharing yet is counted as if it joined the sharers, with the share for the rest kept while
    // any other does not share: when none is busy (a relay starting beside a backlog), one claim would otherwise give
    // the first subscription with due lanes all of the capacity.
    const joined = sharesSlots(sub) ? sharing : sharing + 1
    const sharers = joined + (healthy > joined ? 1 : 0)
    const share = failingBusy
      ? Math.ceil((capacity * (concurrency - failingQuota(concurrency))) / concurrency)
      : capacity
    // At least one lane each: a subscription in good standing may always start its first request (rule 1).
    return { id: sub.id, room: Math.max(0, Math.max(1, Math.ceil(share / sharers)) - sub.held) }
  })
}

/**
 * How many more lanes the relay may hold (claimed ahead or in delivery) out of `capacity`, counted as the rule
 * counts slots: a subscription in good standing's first lane is its own (rule 1), and the failing ones' lanes count
 * at most their share of the capacity (rule 2) — requests under way when their subscription turned failing (a
 * hanging endpoint's, found out only after a while) must not use up the claim room the others need. One subscription
 * alone counts every lane it holds.
 */
export function claimBudget(picture: SlotPicture, capacity: number): number {
  const { subscriptions, concurrency } = picture
  if (subscriptions.length <= 1) return capacity - (subscriptions[0]?.held ?? 0)
  let counted = 0
  let failingHeld = 0
  for (const sub of subscriptions) {
    if (sub.failing) failingHeld += sub.held
    else counted += Math.max(0, sub.held - 1)
  }
  const failingLimit = Math.ceil((capacity * failingQuota(concurrency)) / concurrency)
  return capacity - counted - Math.min(failingHeld, failingLimit)
}

/** Whether a lane of some served subscription could start a request now (so a claim would find it a slot). */
export function canStartAny(picture: SlotPicture): boolean {
  const counts = tally(picture)
  return picture.subscriptions.some((sub) => mayStartWith(picture, counts, sub))
}
