/** The framework-free core on a serverless function, as packages/consumer/README.md shows it: type-checked, never run. */
// #region consumer-core
import { createConsumer, createPool } from '@outbox/consumer'
import { Kysely, PostgresDialect } from 'kysely'

/** The parts of an AWS Lambda function URL event and result used here. */
interface LambdaUrlEvent {
  requestContext: { http: { method: string } }
  headers: Record<string, string>
  body?: string
  isBase64Encoded: boolean
}

const db = new Kysely<any>({ dialect: new PostgresDialect({ pool: createPool({ max: 1 }) }) })
const consumer = createConsumer({ db, secret: process.env.OUTBOX_SECRET })
const receive = consumer.handle(async (event, trx) => {
  await trx.insertInto('audit_log').values({ event_id: event.eventId, type: event.type }).execute()
})

export async function handler(event: LambdaUrlEvent) {
  const answer = await receive({
    method: event.requestContext.http.method,
    headers: event.headers, // a record or a web Headers; names are matched case-insensitively
    body: Buffer.from(event.body ?? '', event.isBase64Encoded ? 'base64' : 'utf8'), // the exact bytes
  })
  // { status, headers, body, closeConnection }: a server that streams the body itself closes the
  // connection when closeConnection is true (the body was left unread).
  return { statusCode: answer.status, headers: answer.headers, body: answer.body }
}
// #endregion consumer-core
