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
  readonly relay: number
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
}

/** The effects table the handler writes: not idempotent by itself, so a double apply shows as two rows. */
export async function createEffects(db: Kysely<any>): Promise<void> {
  await sql`CREATE TABLE IF NOT EXISTS model_effects (
    n bigserial PRIMARY KEY, event_id uuid NOT NULL, aggregate_id text NOT NULL, sequence bigint NOT NULL)`.execute(
    db,
  )
}

/**
 * The subscriber: the REAL `dedupe` middleware on its own database, behind a gate that holds every request until
 * the model answers it (`/hooks/<relay>` tells which relay sent it). Nothing is applied unless the model says 'ok'.
 */
export class ModelSink {
  readonly held: HeldRequest[] = []
  #server: Server | undefined
  #url = ''
  listener: SinkListener | undefined

  constructor(private readonly db: Kysely<any>) {}

  /** The URL a relay sends to. */
  urlFor(relay: number): string {
    return `${this.#url}/hooks/${relay}`
  }

  async start(): Promise<void> {
    const quiet = () => {}
    const consumer = createConsumer({
      db: this.db,
      sequence: 'monotonic',
      allowUnsigned: true, // the model's relays send unsigned: signatures are not what it explores
      logger: { debug: quiet, info: quiet, warn: quiet, error: quiet },
    })
    const apply = consumer.dedupe(async (event, trx) => {
      await sql`INSERT INTO model_effects (event_id, aggregate_id, sequence)
        VALUES (${event.eventId}, ${event.aggregateId}, ${event.sequence})`.execute(trx)
    })
    const app = express()
    app.post('/hooks/:relay', (req: Request, res: Response, next: NextFunction) => {
      let answered = false
      const held: HeldRequest = {
        relay: Number(req.params.relay),
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
      res.on('close', () => {
        if (answered || res.writableFinished) return
        held.closedByRelay = true
        this.#forget(held)
        this.listener?.closed(held)
      })
    })
    this.#server = await new Promise<Server>((resolve) => {
      const server = app.listen(0, '127.0.0.1', () => resolve(server))
    })
    this.#server.keepAliveTimeout = 600_000
    this.#url = `http://127.0.0.1:${(this.#server.address() as AddressInfo).port}`
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
  apply: (req: Request, res: Response, next: NextFunction) => unknown,
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
