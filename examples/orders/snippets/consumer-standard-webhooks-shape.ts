/** The "body of another shape" recipe of packages/consumer/README.md: type-checked in CI, never run. */
// #region consumer-standard-webhooks-shape
import {
  createConsumer,
  createPool,
  type EnvelopeReader,
  standardWebhooksEnvelope,
  svixVerifier,
} from '@outbox/consumer'
import { Kysely, PostgresDialect } from 'kysely'

// A sender whose bodies are { event: 'user.created', payload: { … } }: hand the reader the standard shape.
// The id still comes from the signed webhook-id (svix-id) header.
const acmeEnvelope: EnvelopeReader = (body, headers) => {
  const { event, payload } = body as { event?: unknown; payload?: unknown }
  return standardWebhooksEnvelope({ type: event, data: payload }, headers)
}

const db = new Kysely<any>({ dialect: new PostgresDialect({ pool: createPool() }) })
const acme = createConsumer({
  db,
  verify: svixVerifier(process.env.ACME_WEBHOOK_SECRET ?? ''),
  envelope: acmeEnvelope,
  source: 'acme',
  sequence: 'off',
})

// #endregion consumer-standard-webhooks-shape
export { acme }
