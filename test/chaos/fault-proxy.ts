import { createServer, type IncomingMessage, type ServerResponse } from 'node:http'
import type { AddressInfo, Socket } from 'node:net'
import { Agent, request } from 'undici'
import type { SeededRandom } from './seeded-random.js'

/** What the proxy does to one request. */
export type FaultKind =
  /** Forward and answer what the subscriber answered. */
  | 'pass'
  /** Answer 500 without forwarding. */
  | 'error500'
  /** Answer 503 with a `Retry-After` of 0–1 s, without forwarding. */
  | 'unavailable503'
  /** Answer 429 with a `Retry-After` of 0–1 s, without forwarding. */
  | 'throttled429'
  /** Hold the request past the relay's timeout, then forward it anyway: a slow network or subscriber. */
  | 'hold'
  /** Reset the relay's connection (TCP RST) without forwarding. */
  | 'reset'
  /** Forward, let the subscriber apply, then drop the connection instead of answering. */
  | 'dropResponse'

/** Relative weights of the faults while faults are on; `pass` included. */
export type FaultWeights = Readonly<Record<FaultKind, number>>

/**
 * Load shedding aimed at single events, on top of the weighted faults: of the events first seen while faults are
 * on, a share get their first requests answered 429 or 503 with `Retry-After: 0`, and the request after those
 * passed on — a burst the endpoint sheds, then recovers from. A streak runs to its end even once faults are off:
 * cut short it would show nothing, and it ends with a pass, so the drain still delivers the event.
 */
export interface RetryAfterStreaks {
  /** Share of events that get a streak. */
  readonly share: number
  /** Fewest and most requests a streak answers 429/503 (inclusive). */
  readonly length: readonly [number, number]
}

/**
 * Every request the proxy saw for one event id, judged from its relay's side: the run's own account of the
 * attempts an event used, independent of the outbox's `attempts` column (which is what is being checked).
 */
export interface EventRequests {
  /**
   * Arrival times (epoch ms) of requests that cost the relay an attempt: answered other than 2xx or 409, reset,
   * dropped, held past the relay's timeout, or answered so late that the relay may have given up first.
   */
  readonly failedAt: number[]
  /** Arrival times of requests still open when their relay was SIGKILLed: a takeover may charge each one attempt. */
  readonly killedAt: number[]
  /**
   * Arrival times of requests answered 2xx in time by the proxy's clock. A relay whose event loop stalled may still
   * have timed out on one (its timer runs before it reads the answer): an attempt the proxy cannot see, except
   * that the relay then sends the event again.
   */
  readonly deliveredAt: number[]
  /** 409 answers (not an attempt). */
  conflicts: number
  /** How the latest request ended. */
  last: RequestOutcome
}

/** What one request cost its relay, as far as the proxy can tell. */
export type RequestOutcome = 'killed' | 'failed' | 'delivered' | 'conflict'

/** How an armed relay kill lands: on the relay's next request, or once that request was applied. */
export type ArmedKillStyle = 'mid-request' | 'after-apply'

/** Counters of what went through the proxy. */
export interface ProxyFigures {
  requests: number
  faults: Record<FaultKind, number>
  /** Answers the subscriber gave to forwarded requests (also those whose answer the proxy then dropped). */
  answers: {
    applied: number
    duplicate_ignored: number
    stale_ignored: number
    conflict: number
    error: number
    /** The subscriber was down or the forward failed. */
    unreachable: number
  }
  /** Held requests forwarded after their relay had given up on them. */
  lateForwards: number
  /** Subscriber answers that found their relay gone (timed out, killed): work done for nobody, a duplicate later. */
  answersToNobody: number
  armedKills: { midRequest: number; afterApply: number }
  /** Requests open when their relay was SIGKILLed (see {@link EventRequests.killedAt}). */
  openAtKills: number
  /** Events given a streak of `Retry-After` answers (their answers are counted in `faults` too). */
  retryAfterStreaks: number
  /** Round trips to the subscriber: the slowest, and how many took longer than the relays' timeout. */
  forwardMs: { max: number; overRelayTimeout: number }
}

/** A fault-injecting reverse proxy between the relays and the subscriber. */
export interface FaultProxy {
  /** The endpoint relay `index` posts to (one path per relay, so an armed kill finds its relay's request). */
  endpoint(index: number): string
  /**
   * Turns faults on (with these weights, and streaks if given) or off (`null`: everything passes, except the rest
   * of streaks already begun).
   */
  setFaults(weights: FaultWeights | null, streaks?: RetryAfterStreaks): void
  /**
   * Arms a kill of relay `index`: `kill` runs on that relay's next request (before it is forwarded) or after the
   * subscriber has answered it (before the relay sees the answer). Resolves true once it ran, false if disarmed.
   */
  armKill(index: number, style: ArmedKillStyle, kill: () => Promise<void>): Promise<boolean>
  /** Cancels an armed kill that has not run. */
  disarm(index: number): void
  /**
   * Records that relay `index` is being SIGKILLed: its requests open now count as killed, not failed. Call it in
   * the same tick as the kill, so no request of the relay can slip in between.
   */
  relayKilled(index: number): void
  readonly figures: ProxyFigures
  /** Every event id a relay sent (the `x-idempotency-key` of every request, faulted or not). */
  readonly seenEventIds: ReadonlySet<string>
  /** What became of every request, by event id (`x-idempotency-key`). */
  readonly requestsByEvent: ReadonlyMap<string, EventRequests>
  /** Requests being handled right now, held ones included. */
  readonly inFlight: number
  close(): Promise<void>
}

/** Options of {@link startFaultProxy}. */
export interface FaultProxyOptions {
  /** The subscriber's webhook URL. */
  readonly target: string
  /** Every fault choice is drawn from this stream. */
  readonly random: SeededRandom
  /** The relays' request timeout: held requests are held longer than this. */
  readonly relayTimeoutMs: number
  /** Called with one line per request (relay, event, fault, the subscriber's answer, timings), for `--trace`. */
  readonly trace?: (line: string) => void
}

const FORWARDED_HEADERS = [
  'content-type',
  'user-agent',
  'x-idempotency-key',
  'x-event-sequence',
  'webhook-id',
  'webhook-timestamp',
  'webhook-signature',
]

/**
 * An answer later than this share of the relays' timeout counts as failed: the relay's clock started before the
 * request reached us, so it may have given up while the answer travelled. Erring this way only ever credits an
 * event with an attempt more, which can hide a broken give-up rule but never invent one.
 */
const IN_TIME_SHARE = 0.8

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms))
}

async function readBody(req: IncomingMessage): Promise<Buffer> {
  const chunks: Buffer[] = []
  for await (const chunk of req) chunks.push(chunk as Buffer)
  return Buffer.concat(chunks)
}

interface Forwarded {
  readonly status: number
  readonly headers: Record<string, string>
  readonly body: Buffer
}

/** Starts the proxy on a free loopback port. */
export async function startFaultProxy(options: FaultProxyOptions): Promise<FaultProxy> {
  const { random } = options
  const agent = new Agent({ connections: 64, keepAliveTimeout: 10_000 })
  const sockets = new Set<Socket>()
  const armed = new Map<
    number,
    { style: ArmedKillStyle; kill: () => Promise<void>; done: (ran: boolean) => void }
  >()
  let weights: FaultWeights | null = null
  let streaks: RetryAfterStreaks | undefined
  /**
   * Streak answers left per event id, the closing pass included; 0 once an event was seen and drew none (or is
   * done with its streak).
   */
  const streakLeft = new Map<string, number>()
  let inFlight = 0
  const seenEventIds = new Set<string>()
  const requestsByEvent = new Map<string, EventRequests>()
  /** Requests being handled, per relay, and whether that relay was killed while they were. */
  const open = new Map<number, Set<{ killed: boolean }>>()
  const figures: ProxyFigures = {
    requests: 0,
    faults: { pass: 0, error500: 0, unavailable503: 0, throttled429: 0, hold: 0, reset: 0, dropResponse: 0 },
    answers: { applied: 0, duplicate_ignored: 0, stale_ignored: 0, conflict: 0, error: 0, unreachable: 0 },
    lateForwards: 0,
    answersToNobody: 0,
    armedKills: { midRequest: 0, afterApply: 0 },
    openAtKills: 0,
    retryAfterStreaks: 0,
    forwardMs: { max: 0, overRelayTimeout: 0 },
  }

  async function forward(req: IncomingMessage, body: Buffer): Promise<Forwarded | null> {
    const headers: Record<string, string> = {}
    for (const name of FORWARDED_HEADERS) {
      const value = req.headers[name]
      if (typeof value === 'string') headers[name] = value
    }
    const started = performance.now()
    try {
      const response = await request(options.target, {
        method: 'POST',
        headers,
        body,
        dispatcher: agent,
        signal: AbortSignal.timeout(10_000),
      })
      const answer = Buffer.from(await response.body.arrayBuffer())
      const tookMs = performance.now() - started
      figures.forwardMs.max = Math.max(figures.forwardMs.max, Math.round(tookMs))
      if (tookMs > options.relayTimeoutMs) figures.forwardMs.overRelayTimeout += 1
      const status = response.statusCode
      if (status === 200) {
        const text = answer.toString('utf8')
        if (text.includes('duplicate_ignored')) figures.answers.duplicate_ignored += 1
        else if (text.includes('stale_ignored')) figures.answers.stale_ignored += 1
        else figures.answers.applied += 1
      } else if (status === 409) figures.answers.conflict += 1
      else figures.answers.error += 1
      const contentType = response.headers['content-type']
      return {
        status,
        headers: typeof contentType === 'string' ? { 'content-type': contentType } : {},
        body: answer,
      }
    } catch {
      figures.answers.unreachable += 1
      return null
    }
  }

  function answer(res: ServerResponse, forwarded: Forwarded | null): void {
    if (res.destroyed || res.socket === null || res.socket.destroyed) {
      if (forwarded !== null && forwarded.status === 200) figures.answersToNobody += 1
      return
    }
    if (forwarded === null) {
      res.writeHead(502, { 'content-type': 'text/plain' }).end('subscriber unreachable')
      return
    }
    res.writeHead(forwarded.status, forwarded.headers).end(forwarded.body)
  }

  async function takeArmed(index: number, style: ArmedKillStyle): Promise<void> {
    const kill = armed.get(index)
    if (!kill || kill.style !== style) return
    armed.delete(index)
    if (style === 'mid-request') figures.armedKills.midRequest += 1
    else figures.armedKills.afterApply += 1
    await kill.kill()
    kill.done(true)
  }

  /** The next answer of the event's streak, drawn when the event is first seen; undefined outside a streak. */
  function streakFault(eventId: string | string[] | undefined): FaultKind | undefined {
    if (typeof eventId !== 'string') return undefined
    let left = streakLeft.get(eventId)
    if (left === undefined) {
      if (weights === null || streaks === undefined) return undefined
      left = random.chance(streaks.share) ? random.int(streaks.length[0], streaks.length[1]) + 1 : 0
      if (left > 0) figures.retryAfterStreaks += 1
    }
    streakLeft.set(eventId, Math.max(0, left - 1))
    if (left === 0) return undefined
    // The closing pass: left to the weighted faults, too few streak events would get through in a short run.
    if (left === 1) return 'pass'
    return random.chance(0.5) ? 'throttled429' : 'unavailable503'
  }

  /** What a request cost its relay, judged once the exchange is over. */
  function judge(res: ServerResponse, killed: boolean, tookMs: number): RequestOutcome {
    if (killed) return 'killed'
    if (!res.writableFinished || tookMs > options.relayTimeoutMs * IN_TIME_SHARE) return 'failed'
    if (res.statusCode >= 200 && res.statusCode < 300) return 'delivered'
    return res.statusCode === 409 ? 'conflict' : 'failed'
  }

  function record(eventId: string, outcome: RequestOutcome, arrivedAt: number): void {
    let entry = requestsByEvent.get(eventId)
    if (!entry) {
      entry = { failedAt: [], killedAt: [], deliveredAt: [], conflicts: 0, last: outcome }
      requestsByEvent.set(eventId, entry)
    }
    entry.last = outcome
    if (outcome === 'killed') entry.killedAt.push(arrivedAt)
    else if (outcome === 'failed') entry.failedAt.push(arrivedAt)
    else if (outcome === 'delivered') entry.deliveredAt.push(arrivedAt)
    else entry.conflicts += 1
  }

  async function handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    // Taken first, before the body is read: the earliest this request can be said to have started, so a span
    // measured from it is never shorter than the relay's own.
    const arrivedAt = Date.now()
    const arrived = performance.now()
    const match = /^\/r(\d+)\/hooks$/.exec(req.url ?? '')
    if (!match) {
      await readBody(req)
      res.writeHead(404).end()
      return
    }
    const relay = Number(match[1])
    figures.requests += 1
    const eventId = req.headers['x-idempotency-key']
    if (typeof eventId === 'string') seenEventIds.add(eventId)
    let fault: FaultKind | undefined
    // Open from the moment its headers are in: a relay killed while its body is still arriving left it open too.
    const mine = { killed: false }
    const openOfRelay = open.get(relay) ?? new Set()
    open.set(relay, openOfRelay)
    openOfRelay.add(mine)
    res.once('close', () => {
      openOfRelay.delete(mine)
      const tookMs = performance.now() - arrived
      const outcome = judge(res, mine.killed, tookMs)
      if (typeof eventId === 'string') record(eventId, outcome, arrivedAt)
      options.trace?.(
        `r${relay} ${eventId} #${req.headers['x-event-sequence']} ${fault ?? '-'} -> ${res.headersSent ? res.statusCode : 'no answer'} after ${Math.round(tookMs)} ms${res.writableFinished ? '' : ' (relay gone)'}: ${outcome}`,
      )
    })
    const body = await readBody(req)
    // The relay dies while this request is on the wire; the request itself still travels on.
    await takeArmed(relay, 'mid-request')
    const streak = streakFault(eventId)
    fault = streak ?? (weights === null ? 'pass' : random.weighted(weights))
    // A streak says `Retry-After: 0`: every retry then comes at the schedule's first delay, so the event uses its
    // attempts up within a second or two, far inside the horizon.
    const retryAfter = () => (streak !== undefined ? '0' : String(random.int(0, 1)))
    figures.faults[fault] += 1
    switch (fault) {
      case 'error500':
        res.writeHead(500, { 'content-type': 'text/plain' }).end('injected failure')
        return
      case 'unavailable503':
        res.writeHead(503, { 'retry-after': retryAfter() }).end('injected unavailability')
        return
      case 'throttled429':
        res.writeHead(429, { 'retry-after': retryAfter() }).end('injected throttling')
        return
      case 'reset':
        req.socket.resetAndDestroy()
        return
      case 'hold': {
        const holdMs = options.relayTimeoutMs + random.int(50, 1500)
        if (random.chance(0.5)) {
          // Arrives late: the relay has timed out (and may have retried or moved on) before it lands.
          await sleep(holdMs)
          figures.lateForwards += 1
          const late = await forward(req, body)
          answer(res, late)
        } else {
          // A slow subscriber: applied at once, answered after the relay stopped waiting.
          const slow = await forward(req, body)
          await sleep(holdMs)
          answer(res, slow)
        }
        return
      }
      case 'dropResponse': {
        await forward(req, body)
        req.socket.destroy()
        return
      }
      case 'pass': {
        const forwarded = await forward(req, body)
        await takeArmed(relay, 'after-apply')
        answer(res, forwarded)
        return
      }
    }
  }

  const server = createServer((req, res) => {
    // Writing to a relay that already hung up is expected here, not an error.
    res.on('error', () => {})
    inFlight += 1
    handle(req, res)
      .catch(() => {
        if (!res.destroyed) res.destroy()
      })
      .finally(() => {
        inFlight -= 1
      })
  })
  server.keepAliveTimeout = 30_000
  server.on('connection', (socket) => {
    sockets.add(socket)
    socket.on('close', () => sockets.delete(socket))
  })
  // A client that vanishes mid-request (a killed relay) must not surface as an error here.
  server.on('clientError', (_error, socket) => socket.destroy())
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  const { port } = server.address() as AddressInfo

  const disarm = (index: number) => {
    const kill = armed.get(index)
    armed.delete(index)
    kill?.done(false)
  }
  return {
    endpoint: (index) => `http://127.0.0.1:${port}/r${index}/hooks`,
    setFaults(next, nextStreaks) {
      weights = next
      streaks = next === null ? undefined : nextStreaks
    },
    armKill(index, style, kill) {
      armed.get(index)?.done(false)
      return new Promise<boolean>((done) => armed.set(index, { style, kill, done }))
    },
    disarm,
    relayKilled(index) {
      for (const request of open.get(index) ?? []) {
        if (!request.killed) figures.openAtKills += 1
        request.killed = true
      }
    },
    figures,
    seenEventIds,
    requestsByEvent,
    get inFlight() {
      return inFlight
    },
    async close() {
      for (const index of [...armed.keys()]) disarm(index)
      for (const socket of sockets) socket.destroy()
      await new Promise<void>((resolve) => server.close(() => resolve()))
      await agent.close()
    },
  }
}
