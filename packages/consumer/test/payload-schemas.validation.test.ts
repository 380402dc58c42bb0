import { createServer, type Server } from 'node:http'
import type { AddressInfo } from 'node:net'
import { useTestDatabase } from '@outbox/test-harness'
import * as v from 'valibot'
import { afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest'
import { z } from 'zod'
import { createConsumer, MAX_REPORTED_ISSUES, OutboxError } from '../src/index.js'
import {
  appWith,
  countRows,
  createEffects,
  delivery,
  type HttpAnswer,
  listen,
  makeEvent,
  post,
  quiet,
  recorded,
  writeEffect,
} from './support.js'

const t = useTestDatabase()

beforeAll(async () => {
  await createEffects(t.db)
})

beforeEach(async () => {
  await t.db.deleteFrom('processed_events').execute()
  await t.db.deleteFrom('consumer_cursors').execute()
  await t.db.deleteFrom('effects').execute()
})

const servers: { close: () => Promise<void> }[] = []
afterEach(async () => {
  await Promise.all(servers.splice(0).map((server) => server.close()))
})

/** A consumer on a real Express server; `seen` keeps the data each handler call received. */
async function zodConsumer() {
  const seen: unknown[] = []
  const { dedupe } = createConsumer({
    db: t.db,
    allowUnsigned: true,
    logger: quiet,
    schemas: {
      'order.created': z.object({
        order_id: z.string(),
        total_cents: z.number().int().nonnegative(),
        // A transforming schema: the handler must get the output, not the wire value.
        placed_at: z.iso.datetime().transform((text) => new Date(text)),
      }),
      'order.items': z.object({ items: z.array(z.object({ sku: z.string() })) }),
      'order.audited': z.object({ ok: z.boolean() }).refine(async (value) => value.ok, 'the audit failed'),
      'order.broken': {
        '~standard': {
          version: 1,
          vendor: 'test',
          validate: () => {
            throw new Error('the schema itself is broken')
          },
        },
      },
    },
  })
  const server = await listen(
    appWith(
      dedupe(async (event, trx) => {
        seen.push(event.data)
        await writeEffect(trx, event)
      }),
    ),
  )
  servers.push(server)
  return { url: server.url, seen }
}

async function send(url: string, type: string, data: unknown, aggregateId = 'a1', sequence = 1) {
  const event = makeEvent({ type, aggregateId, sequence, data: data as never })
  const { body, headers } = delivery(event)
  return { event, answer: await post(url, body, headers) }
}

async function expectInvalidPayload(answer: HttpAnswer): Promise<string[]> {
  expect(answer.status).toBe(422)
  expect(answer.headers['content-type']).toMatch(/^application\/problem\+json/)
  expect(answer.json).toMatchObject({ status: 422, code: 'invalid_payload' })
  expect(await countRows(t.db, 'processed_events')).toBe(0)
  expect(await countRows(t.db, 'consumer_cursors')).toBe(0)
  expect(await countRows(t.db, 'effects')).toBe(0)
  return answer.json.errors
}

describe('schemas (zod): the payload is checked before anything is recorded', () => {
  it('answers 422 invalid_payload with each issue at its path, records nothing, and never calls the handler', async () => {
    const { url, seen } = await zodConsumer()
    const { answer } = await send(url, 'order.created', {
      order_id: 42,
      total_cents: -1,
      placed_at: '2026-12-04T10:00:00.000Z',
    })
    const errors = await expectInvalidPayload(answer)
    expect(errors).toHaveLength(2)
    expect(errors[0]).toMatch(/^data\.order_id: /)
    expect(errors[1]).toMatch(/^data\.total_cents: /)
    expect(answer.json.detail).toContain('"order.created"')
    expect(seen).toEqual([])
  })

  it('applies a valid payload and hands the handler the schema output (transformed)', async () => {
    const { url, seen } = await zodConsumer()
    const { event, answer } = await send(url, 'order.created', {
      order_id: '42',
      total_cents: 4200,
      placed_at: '2026-12-04T10:00:00.000Z',
    })
    expect(answer.status).toBe(200)
    expect(answer.json).toMatchObject({ status: 'applied' })
    expect(await recorded(t.db, event)).toEqual({ processed: 1, effects: 1, cursor: 1 })
    expect(seen).toHaveLength(1)
    const data = seen[0] as { placed_at: unknown }
    expect(data.placed_at).toBeInstanceOf(Date)
    expect((data.placed_at as Date).toISOString()).toBe('2026-12-04T10:00:00.000Z')
  })

  it('the same event, fixed at the source, applies once the sender retries it: nothing of the refusal lingers', async () => {
    const { url } = await zodConsumer()
    const bad = makeEvent({ type: 'order.created', data: { order_id: '1' } as never })
    const refused = delivery(bad)
    await expectInvalidPayload(await post(url, refused.body, refused.headers))
    // Same id and sequence, as a redrive after a producer-side fix would send it.
    const fixed = delivery({
      ...bad,
      data: { order_id: '1', total_cents: 1, placed_at: '2026-01-01T00:00:00Z' },
    })
    const answer = await post(url, fixed.body, fixed.headers)
    expect(answer.json).toMatchObject({ status: 'applied' })
    expect(await recorded(t.db, bad)).toEqual({ processed: 1, effects: 1, cursor: 1 })
  })

  it(`reports at most ${MAX_REPORTED_ISSUES} issues and says how many more there were`, async () => {
    const { url } = await zodConsumer()
    const items = Array.from({ length: 50 }, (_, index) => ({ sku: index }))
    const errors = await expectInvalidPayload((await send(url, 'order.items', { items })).answer)
    expect(errors).toHaveLength(MAX_REPORTED_ISSUES + 1)
    expect(errors[0]).toMatch(/^data\.items\[0\]\.sku: /)
    expect(errors[MAX_REPORTED_ISSUES - 1]).toMatch(/^data\.items\[9\]\.sku: /)
    expect(errors[MAX_REPORTED_ISSUES]).toBe(`… and ${50 - MAX_REPORTED_ISSUES} more issues`)
  })

  it('awaits an asynchronous schema', async () => {
    const { url } = await zodConsumer()
    const errors = await expectInvalidPayload((await send(url, 'order.audited', { ok: false })).answer)
    expect(errors).toEqual(['data: the audit failed'])
    const { answer } = await send(url, 'order.audited', { ok: true }, 'a2')
    expect(answer.json).toMatchObject({ status: 'applied' })
  })

  it('lets an event type without a schema through unchecked, including names of Object.prototype members', async () => {
    const { url, seen } = await zodConsumer()
    expect((await send(url, 'order.shipped', { anything: [1, 'two'] }, 'a1')).answer.status).toBe(200)
    expect((await send(url, 'constructor', { x: 1 }, 'a2')).answer.status).toBe(200)
    expect((await send(url, '__proto__', { y: 2 }, 'a3')).answer.status).toBe(200)
    expect(seen).toEqual([{ anything: [1, 'two'] }, { x: 1 }, { y: 2 }])
  })

  it('answers 500 handler_failed, not 422, when the schema itself throws: the fault is the application’s', async () => {
    const { url, seen } = await zodConsumer()
    const { answer } = await send(url, 'order.broken', {})
    expect(answer.status).toBe(500)
    expect(answer.json).toMatchObject({ code: 'handler_failed' })
    expect(answer.text).not.toContain('the schema itself is broken')
    expect(await countRows(t.db, 'processed_events')).toBe(0)
    expect(seen).toEqual([])
  })
})

describe('schemas (valibot) through the node:http adapter', () => {
  async function valibotServer(): Promise<{ url: string; seen: unknown[] }> {
    const seen: unknown[] = []
    const { node } = createConsumer({
      db: t.db,
      allowUnsigned: true,
      logger: quiet,
      schemas: {
        'order.cancelled': v.object({
          order_id: v.string(),
          reason: v.pipe(v.string(), v.minLength(3, 'say why in at least 3 characters')),
        }),
      },
    })
    const server: Server = createServer(
      node(async (event, trx) => {
        seen.push(event.data)
        await writeEffect(trx, event)
      }),
    )
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
    servers.push({
      close: () =>
        new Promise<void>((resolve, reject) => {
          server.closeAllConnections()
          server.close((error) => (error ? reject(error) : resolve()))
        }),
    })
    return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, seen }
  }

  it('answers 422 with valibot’s message at its path and records nothing', async () => {
    const { url, seen } = await valibotServer()
    const errors = await expectInvalidPayload(
      (await send(url, 'order.cancelled', { order_id: '7', reason: 'no' })).answer,
    )
    expect(errors).toEqual(['data.reason: say why in at least 3 characters'])
    expect(seen).toEqual([])
  })

  it('applies a valid payload', async () => {
    const { url, seen } = await valibotServer()
    const { event, answer } = await send(url, 'order.cancelled', { order_id: '7', reason: 'customer asked' })
    expect(answer.json).toMatchObject({ status: 'applied' })
    expect(await recorded(t.db, event)).toEqual({ processed: 1, effects: 1, cursor: 1 })
    expect(seen).toEqual([{ order_id: '7', reason: 'customer asked' }])
  })
})

describe('the schemas option is checked when the consumer is created', () => {
  const cases: [string, unknown, RegExp][] = [
    ['an array', [z.string()], /`schemas` must be an object keyed by event type.*got an array/],
    ['a function', () => true, /`schemas` must be an object keyed by event type.*got function/],
    [
      'a value that is not a schema',
      { 'order.created': { parse: () => ({}) } },
      /`schemas\["order\.created"\]` is not a Standard Schema/,
    ],
    [
      'null for a type',
      { 'order.created': null },
      /`schemas\["order\.created"\]` is not a Standard Schema.*got null/,
    ],
    [
      'another version of the spec',
      { 'order.created': { '~standard': { version: 2, vendor: 'x', validate: () => ({ value: 1 }) } } },
      /is not a Standard Schema \(version 1\)/,
    ],
  ]
  for (const [name, schemas, message] of cases) {
    it(`refuses ${name}, naming the option`, () => {
      let thrown: unknown
      try {
        createConsumer({ db: t.db, allowUnsigned: true, logger: quiet, schemas: schemas as never })
      } catch (error) {
        thrown = error
      }
      expect(thrown).toBeInstanceOf(OutboxError)
      expect((thrown as OutboxError).code).toBe('ERR_OUTBOX_INVALID_OPTION')
      expect((thrown as OutboxError & { option?: string }).option).toBe('schemas')
      expect((thrown as Error).message).toMatch(message)
    })
  }

  it('accepts a schema that is a function carrying `~standard`, as arktype’s are', async () => {
    const positive = Object.assign((value: unknown) => value, {
      '~standard': {
        version: 1 as const,
        vendor: 'function-shaped',
        validate: (value: unknown) =>
          typeof value === 'object' && value !== null && (value as { n?: unknown }).n === 1
            ? { value }
            : { issues: [{ message: 'n must be 1', path: [{ key: 'n' }] }] },
      },
    })
    const { dedupe } = createConsumer({
      db: t.db,
      allowUnsigned: true,
      logger: quiet,
      schemas: { 'order.counted': positive },
    })
    const server = await listen(appWith(dedupe(async () => {})))
    servers.push(server)
    expect(await expectInvalidPayload((await send(server.url, 'order.counted', { n: 2 })).answer)).toEqual([
      'data.n: n must be 1',
    ])
    expect((await send(server.url, 'order.counted', { n: 1 })).answer.json).toMatchObject({
      status: 'applied',
    })
  })

  it('keeps its own copy: changing the object later changes nothing', async () => {
    const schemas: Record<string, unknown> = { 'order.created': z.object({ order_id: z.string() }) }
    const { dedupe } = createConsumer({
      db: t.db,
      allowUnsigned: true,
      logger: quiet,
      schemas: schemas as never,
    })
    delete schemas['order.created']
    const server = await listen(appWith(dedupe(async () => {})))
    servers.push(server)
    await expectInvalidPayload((await send(server.url, 'order.created', { order_id: 1 })).answer)
  })
})
