import type { Server } from 'node:http'
import type { AddressInfo } from 'node:net'
import { createConsumer } from '@outbox/consumer'
import express, { type NextFunction, type Request, type Response } from 'express'
import { type Kysely, sql } from 'kysely'

/** How the model answers one request the sink holds. */
export type Answer =
  /** The real `dedupe` applies it (or answers duplicate / stale) and the answer reaches the relay. */
  | 'ok'
  /** The real `dedupe` applies it, then the connection is cut before the answer leaves: the relay sees an error. */
  | 'ok-then-cut'
  /** The subscriber waits for an earlier sequence (not an attempt). */
  | '409'
  | '500'
  /** Rate limited / deploying, with `Retry-After` seconds. */
  | { readonly status: 429 | 503; readonly retryAfterSeconds: number }
  /** The connection is cut before anything is applied. */
  | 'cut'

/** A request the sink holds until the model answers it. */
export interface HeldRequest {
  /** The relay that sent it, for the implicit subscription (`/hooks/<relay>`); -1 for a stored subscription's. */
  readonly relay: number
  /** The model's key of the subscription it was sent for: `implicit`, or the stored subscription's path key. */
  readonly subscription: string
  readonly eventId: string
  readonly sequence: number
  /** Set when the relay's side closed it before any answer (timeout, stop, crash). */
  closedByRelay: boolean
  answer(answer: Answer): Promise<void>
}

/** What the sink tells the model about a request's end that the model did not choose. */
export interface SinkListener {
  /** The relay cut a held request (its timeout, its stop or its crash). */
  closed(request: HeldRequest): void
  /** A request reached the subscriber (before anything answers it). */
  arrived(request: HeldRequest): void
}

/** The model's key of the implicit subscription (the relays' `endpoint`). */
export const IMPLICIT = 'implicit'

/**
 * The effects table the handlers write, one row per apply with the subscription it came through: not idempotent by
 * itself, so a double apply shows as two rows.
 */
export async function createEffects(db: Kysely<any>): Promise<void> {
  await sql`CREATE TABLE IF NOT EXISTS model_effects (
    n bigserial PRIMARY KEY, subscription text NOT NULL, event_id uuid NOT NULL, aggregate_id text NOT NULL,
    sequence bigint NOT NULL)`.execute(db)
}

type Middleware = (req: Request, res: Response, next: NextFunction) => unknown

/**
 * The subscribers: the REAL `dedupe` middleware on its own database, behind a gate that holds every request until
 * the model answers it. The implicit subscription's relays send to `/hooks/<relay>` (which relay sent it); each
 * stored subscription has its own URL, `/subs/<key>`, and its own consumer whose `source` is that key, so its
 * dedupe records and cursors are its own, as two subscribers' would be. Nothing is applied unless the model says
 * 'ok'.
 */
export class ModelSink {
  readonly held: HeldRequest[] = []
  /** Each subscription's dedupe, by model key. */
  readonly #consumers = new Map<string, Middleware>()
  #server: Server | undefined
  #url = ''
  listener: SinkListener | undefined

  constructor(private readonly db: Kysely<any>) {}

  /** The URL a relay sends to. */
  urlFor(relay: number): string {
    return `${this.#url}/hooks/${relay}`
  }

  /** The URL a stored subscription is created with. */
  urlForSubscription(key: string): string {
    return `${this.#url}/subs/${key}`
  }

  /** The dedupe of one subscription's consumer (its `source` is the subscription's key), made on first use. */
  #consumer(subscription: string): Middleware {
    let apply = this.#consumers.get(subscription)
    if (apply) return apply
    const quiet = () => {}
    const consumer = createConsumer({
      db: this.db,
      source: subscription,
      sequence: 'monotonic',
      // Signatures are not what the model explores: the implicit relays send unsigned, stored subscriptions sign.
      allowUnsigned: true,
      logger: { debug: quiet, info: quiet, warn: quiet, error: quiet },
    })
    apply = consumer.dedupe(async (event, trx) => {
      await sql`INSERT INTO model_effects (subscription, event_id, aggregate_id, sequence)
        VALUES (${subscription}, ${event.eventId}, ${event.aggregateId}, ${event.sequence})`.execute(trx)
    })
    this.#consumers.set(subscription, apply)
    return apply
  }

  async start(): Promise<void> {
    const app = express()
    app.post('/hooks/:relay', (req, res, next) =>
      this.#hold(req, res, next, Number(req.params.relay), IMPLICIT),
    )
    app.post('/subs/:key', (req, res, next) => this.#hold(req, res, next, -1, String(req.params.key)))
    this.#server = await new Promise<Server>((resolve) => {
      const server = app.listen(0, '127.0.0.1', () => resolve(server))
    })
    this.#server.keepAliveTimeout = 600_000
    this.#url = `http://127.0.0.1:${(this.#server.address() as AddressInfo).port}`
  }

  #hold(req: Request, res: Response, next: NextFunction, relay: number, subscription: string): void {
    const apply = this.#consumer(subscription)
    let answered = false
    const held: HeldRequest = {
      relay,
      subscription,
      eventId: String(req.headers['x-idempotency-key']),
      sequence: Number(req.headers['x-event-sequence']),
      closedByRelay: false,
      answer: async (answer) => {
        answered = true
        this.#forget(held)
        await respond(answer, req, res, next, apply)
      },
    }
    // The body is left for dedupe to read itself: the model keys requests by the headers' event id.
    this.held.push(held)
    this.listener?.arrived(held)
    res.on('close', () => {
      if (answered || res.writableFinished) return
      held.closedByRelay = true
      this.#forget(held)
      this.listener?.closed(held)
    })
  }

  #forget(request: HeldRequest): void {
    const index = this.held.indexOf(request)
    if (index >= 0) this.held.splice(index, 1)
  }

  async close(): Promise<void> {
    this.#server?.closeAllConnections()
    await new Promise<void>((resolve) => (this.#server ? this.#server.close(() => resolve()) : resolve()))
  }
}

async function respond(
  answer: Answer,
  req: Request,
  res: Response,
  next: NextFunction,
  apply: Middleware,
): Promise<void> {
  if (answer === 'cut') {
    req.socket.destroy()
    return
  }
  if (answer === 'ok' || answer === 'ok-then-cut') {
    if (answer === 'ok-then-cut') {
      // The handler's transaction commits; the answer never leaves.
      res.end = (() => {
        req.socket.destroy()
        return res
      }) as Response['end']
    }
    await new Promise<void>((resolve) => {
      res.once('close', () => resolve())
      void apply(req, res, (error?: unknown) => {
        next(error)
        resolve()
      })
    })
    return
  }
  if (answer === '409') res.status(409).json({ code: 'sequence_gap' })
  else if (answer === '500') res.status(500).json({ code: 'handler_failed' })
  else res.status(answer.status).set('retry-after', String(answer.retryAfterSeconds)).json({})
}
