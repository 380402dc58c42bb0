import { randomBytes, randomUUID } from 'node:crypto'
import {
  createServer,
  request as httpRequest,
  type IncomingHttpHeaders,
  type RequestListener,
  type Server,
} from 'node:http'
import type { AddressInfo } from 'node:net'
import {
  type JsonValue,
  type OutboxEvent,
  parseSigningSecrets,
  serializeEnvelope,
  signWebhook,
} from '@outbox/protocol'
import express, { type Express, type RequestHandler } from 'express'
import { type Kysely, sql } from 'kysely'
import type { Logger, Refusal } from '../src/index.js'

/** A fresh Standard Webhooks secret (`whsec_` + base64 of 24 random bytes). */
export function newSecret(): string {
  return `whsec_${randomBytes(24).toString('base64')}`
}

/** A logger that keeps every line, so tests can assert what a refusal logged. */
export function recordingLogger(): Logger & {
  lines: { level: string; msg: string; meta?: Record<string, unknown> }[]
} {
  const lines: { level: string; msg: string; meta?: Record<string, unknown> }[] = []
  const at =
    (level: string) =>
    (meta: Record<string, unknown>, msg: string): void => {
      lines.push({ level, msg, meta })
    }
  return { lines, debug: at('debug'), info: at('info'), warn: at('warn'), error: at('error') }
}

/** A logger that drops everything (the consumer warns when created without a secret). */
export const quiet: Logger = { debug: () => {}, info: () => {}, warn: () => {}, error: () => {} }

/** Builds an event like the producer would send; every call gets a new id. */
export function makeEvent<TData = JsonValue>(
  overrides: Partial<OutboxEvent<TData>> & { data?: TData } = {},
): OutboxEvent<TData> {
  return {
    eventId: randomUUID(),
    type: 'order.updated',
    aggregateType: 'order',
    aggregateId: '42',
    sequence: 1,
    occurredAt: new Date().toISOString(),
    data: { status: 'paid' } as TData,
    ...overrides,
  }
}

/** The body and headers of one delivery attempt of `event`, signed when secrets are given. */
export function delivery(
  event: OutboxEvent<unknown>,
  options: { secrets?: string | readonly string[]; timestamp?: Date } = {},
): { body: string; headers: Record<string, string> } {
  const body = serializeEnvelope(event)
  const headers: Record<string, string> = {
    'content-type': 'application/json',
    'x-idempotency-key': event.eventId,
    'x-event-sequence': String(event.sequence),
  }
  if (options.secrets !== undefined) {
    const keys = parseSigningSecrets(options.secrets)
    Object.assign(
      headers,
      signWebhook(keys, {
        eventId: event.eventId,
        body,
        ...(options.timestamp ? { timestamp: options.timestamp } : {}),
      }),
    )
  }
  return { body, headers }
}

/** An Express app with `handler` mounted at POST /hooks and nothing else in front of it. */
export function appWith(handler: RequestHandler): Express {
  const app = express()
  app.post('/hooks', handler)
  return app
}

/**
 * Serves `listener` (an Express app, a `consumer.node` handler, any `node:http` request listener) on a free
 * loopback port; `close` ends the server and its idle keep-alive sockets.
 */
export async function listen(
  listener: RequestListener,
): Promise<{ url: string; close: () => Promise<void> }> {
  const server: Server = createServer(listener)
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  const { port } = server.address() as AddressInfo
  return {
    url: `http://127.0.0.1:${port}`,
    close: () =>
      new Promise<void>((resolve, reject) => {
        server.closeAllConnections()
        server.close((error) => (error ? reject(error) : resolve()))
      }),
  }
}

export interface HttpAnswer {
  readonly status: number
  readonly headers: IncomingHttpHeaders
  readonly text: string
  readonly json: any
}

/** One POST on its own TCP connection (no agent), so parallel calls really run in parallel. */
export function post(
  url: string,
  body: string | Buffer,
  headers: Record<string, string>,
): Promise<HttpAnswer> {
  return new Promise((resolve, reject) => {
    const req = httpRequest(`${url}/hooks`, { method: 'POST', headers, agent: false }, (res) => {
      const chunks: Buffer[] = []
      res.on('data', (chunk: Buffer) => chunks.push(chunk))
      res.on('end', () => {
        const text = Buffer.concat(chunks).toString('utf8')
        let json: unknown
        try {
          json = JSON.parse(text)
        } catch {
          json = undefined
        }
        resolve({ status: res.statusCode ?? 0, headers: res.headers, text, json })
      })
      res.on('error', reject)
    })
    req.on('error', reject)
    req.end(body)
  })
}

export const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms))

/** Waits for `condition` with a generous ceiling: a verdict never depends on how fast this machine is. */
export async function until(condition: () => boolean, what: string, ceilingMs = 30_000): Promise<void> {
  const giveUp = Date.now() + ceilingMs
  while (!condition()) {
    if (Date.now() > giveUp) throw new Error(`gave up waiting for ${what}`)
    await new Promise((resolve) => setTimeout(resolve, 10))
  }
}

/** The table the test handlers write their effect to. */
export async function createEffects(db: Kysely<any>): Promise<void> {
  await sql`CREATE TABLE IF NOT EXISTS effects (
    id bigserial PRIMARY KEY,
    event_id uuid NOT NULL,
    aggregate_type text NOT NULL,
    aggregate_id text NOT NULL,
    sequence bigint NOT NULL
  )`.execute(db)
}

/** A handler body that records the event in `effects`. */
export async function writeEffect(trx: Kysely<any>, event: OutboxEvent<unknown>): Promise<void> {
  await trx
    .insertInto('effects')
    .values({
      event_id: event.eventId,
      aggregate_type: event.aggregateType,
      aggregate_id: event.aggregateId,
      sequence: event.sequence,
    })
    .execute()
}

/** How many rows of each kind exist for an event id / its aggregate. */
export async function recorded(
  db: Kysely<any>,
  event: OutboxEvent<unknown>,
  schema?: string,
): Promise<{ processed: number; effects: number; cursor: number | undefined }> {
  const own = schema === undefined ? db : db.withSchema(schema)
  const processed = await own
    .selectFrom('processed_events')
    .select((eb) => eb.fn.countAll<string>().as('n'))
    .where('event_id', '=', event.eventId)
    .executeTakeFirstOrThrow()
  const effects = await db
    .selectFrom('effects')
    .select((eb) => eb.fn.countAll<string>().as('n'))
    .where('event_id', '=', event.eventId)
    .executeTakeFirstOrThrow()
  return {
    processed: Number(processed.n),
    effects: Number(effects.n),
    cursor: await cursorOf(db, event.aggregateType, event.aggregateId, schema),
  }
}

/** The last applied sequence of an aggregate of one source, or undefined when it has no cursor row. */
export async function cursorOf(
  db: Kysely<any>,
  aggregateType: string,
  aggregateId: string,
  schema?: string,
  source = 'default',
): Promise<number | undefined> {
  const own = schema === undefined ? db : db.withSchema(schema)
  const row = await own
    .selectFrom('consumer_cursors')
    .select('last_sequence')
    .where('source', '=', source)
    .where('aggregate_type', '=', aggregateType)
    .where('aggregate_id', '=', aggregateId)
    .executeTakeFirst()
  return row === undefined ? undefined : Number(row.last_sequence)
}

/** Total rows of a table (for "nothing at all was recorded" checks). */
export async function countRows(db: Kysely<any>, table: string): Promise<number> {
  const row = await db
    .selectFrom(table)
    .select((eb) => eb.fn.countAll<string>().as('n'))
    .executeTakeFirstOrThrow()
  return Number(row.n)
}

/** Collects what `onError` saw. */
export function refusalRecorder(): { refusals: Refusal[]; onError: (refused: Refusal) => void } {
  const refusals: Refusal[] = []
  return { refusals, onError: (refused) => refusals.push(refused) }
}
