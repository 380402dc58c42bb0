import diagnostics from 'node:diagnostics_channel'
import { type EndlessEndpoint, startEndlessEndpoint, useTestDatabase } from '@outbox/test-harness'
import { describe, expect, it, type TestContext } from 'vitest'
import { migrate, Relay, silentLogger } from '../src/index.js'
import { MAX_KEPT_BODY_BYTES } from '../src/webhook-request.js'
import { seedEvents, waitFor } from './support.js'

const t = useTestDatabase()

/** An endless endpoint closed when the calling test ends. */
async function endpoint(
  onTestFinished: TestContext['onTestFinished'],
  options: Parameters<typeof startEndlessEndpoint>[0],
): Promise<EndlessEndpoint> {
  const started = await startEndlessEndpoint(options)
  onTestFinished(() => started.close())
  return started
}

/**
 * The answer bytes the relay's HTTP client read, per request, as undici hands them over (its
 * `undici:request:bodyChunkReceived` channel): what the relay read, whatever the kernel's buffers held besides.
 * Counting stops when the test ends.
 */
function countBytesRead(onTestFinished: TestContext['onTestFinished']) {
  const read = new Map<object, { bytes: number; largestChunk: number }>()
  const listener = (message: unknown) => {
    const { request, chunk } = message as { request: object; chunk: Buffer }
    const entry = read.get(request) ?? { bytes: 0, largestChunk: 0 }
    entry.bytes += chunk.length
    entry.largestChunk = Math.max(entry.largestChunk, chunk.length)
    read.set(request, entry)
  }
  diagnostics.subscribe('undici:request:bodyChunkReceived', listener)
  onTestFinished(() => void diagnostics.unsubscribe('undici:request:bodyChunkReceived', listener))
  return { requests: () => [...read.values()] }
}

/** A relay delivering one schema's events to `url`, with the given request timeout. */
function endpointRelay(schema: string, url: string, requestTimeoutMs: number): Relay {
  return new Relay({ db: t.db, schema, endpoint: url, requestTimeoutMs, logger: silentLogger })
}

/** A schema of the test's own, so no event another test left pending is claimed by this one's relay. */
async function freshSchema(name: string): Promise<string> {
  await migrate(t.db, { schema: name })
  return name
}

async function rows(schema: string) {
  return await t.db
    .withSchema(schema)
    .selectFrom('outbox')
    .select(['sequence', 'status', 'attempts', 'last_status', 'delivery_status', 'last_error'])
    .orderBy('sequence')
    .execute()
}

describe('an endless answer', () => {
  it('costs at most the kept bytes plus one chunk, settles a 2xx as delivered, and never reuses its connection', async ({
    onTestFinished,
  }) => {
    const read = countBytesRead(onTestFinished)
    const hooks = await endpoint(onTestFinished, { status: 200, chunkBytes: 4096, intervalMs: 20 })
    const schema = await freshSchema('endless_ok')
    await seedEvents(t.db, ['endless'], 2, { schema })
    const relay = endpointRelay(schema, hooks.url, 2000)
    const result = await relay.runOnce()
    await waitFor(
      () => hooks.answers.length > 0 && hooks.answers.every((a) => a.closed),
      'the answers closed',
    )
    // Each attempt read the kept bytes and the chunk that crossed them, no more.
    expect(read.requests()).toHaveLength(2)
    for (const request of read.requests())
      expect(request.bytes).toBeLessThanOrEqual(MAX_KEPT_BODY_BYTES + request.largestChunk)
    expect(result).toEqual({ delivered: 2, failed: 0, dead: 0 })
    // The first connection was closed mid-answer, not handed back to the pool: the second request needed a new one.
    expect(hooks.answers[0]!.connection).not.toBe(hooks.answers[1]!.connection)
    // The kept bytes are `{"status":"applied"}` and whitespace: complete JSON, so the consumer's status is read.
    expect(await rows(schema)).toMatchObject([
      { sequence: '1', status: 'sent', attempts: 1, last_status: 200, delivery_status: 'applied' },
      { sequence: '2', status: 'sent', attempts: 1, last_status: 200, delivery_status: 'applied' },
    ])
  })

  it('settles a 500 streaming as fast as the socket takes it with its status, long before the timeout', async ({
    onTestFinished,
  }) => {
    const read = countBytesRead(onTestFinished)
    const hooks = await endpoint(onTestFinished, {
      status: 500,
      prefix: '{"title":"broken","detail":"',
      filler: 'x',
      chunkBytes: 64 * 1024,
    })
    const schema = await freshSchema('endless_500')
    await seedEvents(t.db, ['firehose'], 1, { schema })
    const relay = endpointRelay(schema, hooks.url, 2000)
    const result = await relay.runOnce()
    await waitFor(() => hooks.answers[0]?.closed === true, 'the answer closed')
    // Without pacing the kernel's socket buffers also hold bytes the relay never read: a loose bound, still far below
    // what reading on until the timeout costs on loopback (hundreds of MiB to GiBs in two seconds).
    expect(hooks.answers[0]!.bodyBytesSent).toBeLessThan(32 * 1024 * 1024)
    // What the relay itself read: the kept bytes and the chunk that crossed them.
    const [request] = read.requests()
    expect(request!.bytes).toBeLessThanOrEqual(MAX_KEPT_BODY_BYTES + request!.largestChunk)
    expect(result).toEqual({ delivered: 0, failed: 1, dead: 0 })
    const [row] = await rows(schema)
    expect(row).toMatchObject({ status: 'pending', attempts: 1, last_status: 500 })
    expect(row!.last_error).toMatch(/^HTTP 500: \{"title":"broken","detail":"x+$/)
  })

  it('settles a 2xx whose body is still trickling at the timeout as delivered, not timed out', async ({
    onTestFinished,
  }) => {
    // The status line arrives at once; the body never completes.
    const hooks = await endpoint(onTestFinished, {
      status: 200,
      prefix: '{"status":"applied"',
      chunkBytes: 1,
      intervalMs: 50,
    })
    const schema = await freshSchema('endless_trickle')
    await seedEvents(t.db, ['trickle'], 1, { schema })
    const relay = endpointRelay(schema, hooks.url, 500)
    expect(await relay.runOnce()).toEqual({ delivered: 1, failed: 0, dead: 0 })
    // The kept bytes are not complete JSON: no consumer status to report.
    expect(await rows(schema)).toMatchObject([
      { status: 'sent', attempts: 1, last_status: 200, delivery_status: null },
    ])
  })
})
