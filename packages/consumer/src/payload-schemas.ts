import type { EventCatalog, EventTypeOf, UntypedCatalog } from '@outbox/protocol'
import type { StandardSchemaV1 } from '@standard-schema/spec'
import { OutboxError } from './errors.js'

/**
 * Run-time schemas of event payloads, keyed by event type: any Standard Schema (zod 3.24+, valibot 1+, arktype 2+
 * …). With a catalog, each schema's output must be the payload type the catalog gives that event type, so the
 * handler's types and the checks it relies on cannot drift apart; an event type the catalog lacks is a compile
 * error. Event types without a schema pass unchecked.
 *
 * @example
 * ```ts
 * import type { PayloadSchemas } from '@outbox/consumer'
 * import type { EventCatalog } from '@outbox/protocol'
 * import { z } from 'zod'
 *
 * interface OrderEvents extends EventCatalog {
 *   'order.created': { order_id: string; total_cents: number }
 *   'order.cancelled': { order_id: string; reason: string }
 * }
 * const schemas: PayloadSchemas<OrderEvents> = {
 *   'order.created': z.object({ order_id: z.string(), total_cents: z.number().int().nonnegative() }),
 * }
 * ```
 */
export type PayloadSchemas<Catalog extends EventCatalog = UntypedCatalog> =
  string extends EventTypeOf<Catalog>
    ? { readonly [eventType: string]: StandardSchemaV1 }
    : { readonly [Type in EventTypeOf<Catalog>]?: StandardSchemaV1<unknown, Catalog[Type]> }

/** What {@link validatePayload} found: the schema's output, or the issues to report to the sender. */
export type PayloadCheck =
  | { readonly ok: true; readonly data: unknown }
  | { readonly ok: false; readonly issues: string[] }

/**
 * The most issues one refusal reports. A payload can fail in thousands of places (a long array of bad items); the
 * first few tell the sender what to fix, and the answer stays small.
 */
export const MAX_REPORTED_ISSUES = 10

/** Longest message kept per issue, in characters; a schema's custom message is the sender's to read, not a dump. */
const MAX_ISSUE_MESSAGE_LENGTH = 300

const IDENTIFIER = /^[A-Za-z_$][A-Za-z0-9_$]*$/

function formatPath(path: StandardSchemaV1.Issue['path']): string {
  let text = 'data'
  for (const segment of path ?? []) {
    const key = typeof segment === 'object' && segment !== null ? segment.key : segment
    if (typeof key === 'number') text += `[${key}]`
    else if (typeof key === 'string' && IDENTIFIER.test(key)) text += `.${key}`
    else if (typeof key === 'string') text += `[${JSON.stringify(key)}]`
    else text += `[${String(key)}]`
  }
  return text
}

function formatIssue(issue: StandardSchemaV1.Issue): string {
  const message = typeof issue.message === 'string' && issue.message.length > 0 ? issue.message : 'invalid'
  const kept =
    message.length > MAX_ISSUE_MESSAGE_LENGTH ? `${message.slice(0, MAX_ISSUE_MESSAGE_LENGTH)}…` : message
  return `${formatPath(issue.path)}: ${kept}`
}

/**
 * Checks an event's `data` against the schema of its type, if there is one. Resolves `{ ok: true, data }` with the
 * schema's output (a schema may transform: the handler gets what it returns), or `{ ok: false, issues }` with at
 * most {@link MAX_REPORTED_ISSUES} lines of the form `data.items[0].sku: Required`. A schema that throws rejects:
 * that is the application's fault, not the sender's.
 */
export async function validatePayload(
  schemas: PayloadSchemas | undefined,
  type: string,
  data: unknown,
): Promise<PayloadCheck> {
  // Own keys only: an event typed 'constructor' or '__proto__' must not find Object.prototype's members.
  if (schemas === undefined || !Object.hasOwn(schemas, type)) return { ok: true, data }
  const schema = schemas[type]
  if (schema === undefined) return { ok: true, data }
  const result = await schema['~standard'].validate(data)
  if (result.issues === undefined) return { ok: true, data: result.value }
  const issues = result.issues.slice(0, MAX_REPORTED_ISSUES).map(formatIssue)
  if (result.issues.length > MAX_REPORTED_ISSUES) {
    issues.push(`… and ${result.issues.length - MAX_REPORTED_ISSUES} more issues`)
  }
  // A failure with an empty list still failed: say so rather than answer 422 with nothing to fix.
  if (issues.length === 0) issues.push('data: does not match its schema')
  return { ok: false, issues }
}

function describe(value: unknown): string {
  if (value === null) return 'null'
  if (Array.isArray(value)) return 'an array'
  return typeof value
}

/**
 * Checks the `schemas` option once, at creation: a plain object whose every value is a Standard Schema. Returns a
 * frozen copy (later changes to the caller's object change nothing), or undefined when the option is absent.
 */
export function checkPayloadSchemas(value: unknown, where: string): PayloadSchemas | undefined {
  if (value === undefined) return undefined
  const invalid = (message: string) =>
    new OutboxError('ERR_OUTBOX_INVALID_OPTION', `${where}: ${message}`, { option: 'schemas' })
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    throw invalid(
      `\`schemas\` must be an object keyed by event type, e.g. { 'order.created': z.object({ … }) }; got ${describe(value)}`,
    )
  }
  const checked: Record<string, StandardSchemaV1> = Object.create(null)
  for (const [type, schema] of Object.entries(value)) {
    // Zod and valibot schemas are objects, arktype's are functions; all carry the same '~standard' property.
    const props =
      (typeof schema === 'object' || typeof schema === 'function') && schema !== null
        ? (schema as { '~standard'?: unknown })['~standard']
        : undefined
    const standard = props as Partial<StandardSchemaV1.Props> | undefined
    if (
      typeof standard !== 'object' ||
      standard === null ||
      standard.version !== 1 ||
      typeof standard.validate !== 'function'
    ) {
      throw invalid(
        `\`schemas[${JSON.stringify(type)}]\` is not a Standard Schema (version 1): pass a schema from a library that implements it — zod 3.24+, valibot 1+, arktype 2+ … — got ${describe(schema)}`,
      )
    }
    checked[type] = schema as StandardSchemaV1
  }
  return Object.freeze(checked)
}
