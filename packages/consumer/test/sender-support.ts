import { request as httpRequest, type IncomingHttpHeaders } from 'node:http'
import type { ReceivedEvent } from '@outbox/protocol'
import { type Kysely, sql } from 'kysely'

export { listen as serve } from './support.js'

/** What the server answered to a request whose body was never finished. */
export interface UnfinishedAnswer {
  readonly status: number
  readonly headers: IncomingHttpHeaders
  readonly json: any
}

/**
 * Sends the headers of a POST announcing `announcedBytes` and only the first chunk of its body, never the rest,
 * then waits for the answer AND for the server to close the connection. A server that tried to read the body would
 * wait for the missing bytes forever (the test then fails on its timeout); one that keeps the connection open
 * after answering never resolves it either. So resolving proves: answered on the headers, body left unread,
 * connection closed.
 */
export function postUnfinished(
  url: string,
  headers: Record<string, string>,
  firstChunk: string,
  announcedBytes = 64 * 1024,
): Promise<UnfinishedAnswer> {
  return new Promise((resolve, reject) => {
    let answer: UnfinishedAnswer | undefined
    let closed = false
    const settle = () => {
      if (answer !== undefined && closed) resolve(answer)
    }
    const req = httpRequest(`${url}/hooks`, {
      method: 'POST',
      headers: { ...headers, 'content-length': String(announcedBytes) },
      agent: false,
    })
    req.on('socket', (socket) =>
      socket.on('close', () => {
        closed = true
        settle()
      }),
    )
    req.on('response', (res) => {
      const chunks: Buffer[] = []
      res.on('data', (chunk: Buffer) => chunks.push(chunk))
      res.on('end', () => {
        const text = Buffer.concat(chunks).toString('utf8')
        answer = { status: res.statusCode ?? 0, headers: res.headers, json: JSON.parse(text) }
        settle()
      })
      res.on('error', reject)
    })
    // The server closing a connection mid-upload may surface as a write error on this side: that is the point.
    req.on('error', (error: NodeJS.ErrnoException) => {
      if (error.code !== 'EPIPE' && error.code !== 'ECONNRESET') reject(error)
    })
    req.write(firstChunk)
  })
}

/** The table the sender tests' handlers write their effect to: one row per applied event. */
export async function createReceivedEffects(db: Kysely<any>): Promise<void> {
  await sql`CREATE TABLE IF NOT EXISTS received_effects (
    id bigserial PRIMARY KEY,
    event_id text NOT NULL,
    type text NOT NULL,
    data jsonb,
    occurred_at text
  )`.execute(db)
}

/** A handler body that records the event in `received_effects`. */
export async function writeReceived(trx: Kysely<any>, event: ReceivedEvent<unknown>): Promise<void> {
  await trx
    .insertInto('received_effects')
    .values({
      event_id: event.eventId,
      type: event.type,
      data: JSON.stringify(event.data ?? null),
      occurred_at: event.occurredAt ?? null,
    })
    .execute()
}

/** The effects written for one event id. */
export async function effectsOf(
  db: Kysely<any>,
  eventId: string,
): Promise<{ type: string; data: any; occurred_at: string | null }[]> {
  return db
    .selectFrom('received_effects')
    .select(['type', 'data', 'occurred_at'])
    .where('event_id', '=', eventId)
    .execute()
}

/** The `processed_events` rows of one event id under one source. */
export async function processedRows(
  db: Kysely<any>,
  source: string,
  eventId: string,
): Promise<Record<string, unknown>[]> {
  return db
    .selectFrom('processed_events')
    .selectAll()
    .where('source', '=', source)
    .where('event_id', '=', eventId)
    .execute()
}
