import type { Readable } from 'node:stream'
import { FREE_BODY_BYTES, type LargeBodyPace } from './large-body-pace.js'

/**
 * A request body as a server hands it over: the bytes already read (`Uint8Array`, e.g. a `Buffer` left by
 * `express.raw()`), or a source the consumer reads itself — any async iterable of chunks (a Node `IncomingMessage`
 * is one) or a web `ReadableStream`. A source is read only once the headers passed every check, and only up to
 * `maxBodyBytes`.
 *
 * @example
 * ```ts
 * import type { BodySource } from '@outbox/consumer'
 * const already: BodySource = new TextEncoder().encode('{}')
 * const streamed: BodySource = new Request('http://x', { method: 'POST', body: '{}' }).body!
 * ```
 */
export type BodySource = Uint8Array | AsyncIterable<Uint8Array | string> | ReadableStream<Uint8Array>

/**
 * The outcome of {@link readBody}. `unread` tells whether part of the body was left unread (the caller must then
 * close the connection: the client may still be sending). `consumed`: something else read the source before
 * (a body parser or middleware), so the exact bytes are gone.
 */
export type ReadBodyResult =
  | { readonly ok: true; readonly body: Uint8Array }
  | { readonly ok: false; readonly reason: 'too_large'; readonly unread: boolean }
  | { readonly ok: false; readonly reason: 'timeout' }
  | { readonly ok: false; readonly reason: 'aborted'; readonly error?: unknown }
  | { readonly ok: false; readonly reason: 'consumed' }

/**
 * How {@link readBody} reads: `limitBytes` (past it: `too_large`), `timeoutMs` (the whole body must have arrived
 * by then: `timeout`, the rest left unread) and `onBytes`, told of every chunk kept (`+n`) and of them all again
 * (`-n`) once the read ended, whatever its outcome — what the core counts as the memory bodies in transit hold.
 */
export interface ReadBodyOptions {
  readonly limitBytes: number
  readonly timeoutMs: number
  readonly onBytes?: ((delta: number) => void) | undefined
  /**
   * Paces the bytes past each body's first {@link FREE_BODY_BYTES}: told of each such chunk, it says how many
   * milliseconds to wait before reading on (the body's deadline still runs). See `large-body-pace.ts`.
   */
  readonly pace?: LargeBodyPace | undefined
}

/**
 * A body an adapter can only have in one piece, read when the core asks: `@hono/node-server`'s `arrayBuffer()` on a
 * request whose `content-length` the core has already checked against `maxBodyBytes`. {@link readBody} awaits
 * `read()` against the body's deadline directly, with no stream or iterator around it; anything else that reads
 * it gets one chunk.
 */
export class WholeBody implements AsyncIterable<Uint8Array> {
  constructor(readonly read: () => Promise<Uint8Array>) {}

  async *[Symbol.asyncIterator](): AsyncIterator<Uint8Array> {
    yield await this.read()
  }
}

/**
 * Fires once when the body's time is up; `clear` when the read ended first. `expired` is made only when a reader
 * races it (web streams, iterables): a Node stream is told through `onExpire`, and needs no promise.
 */
class Deadline {
  readonly #timer: ReturnType<typeof setTimeout>
  #expired: Promise<'timeout'> | undefined
  #fire: (() => void) | undefined
  #listener: (() => void) | undefined
  #fired = false

  constructor(timeoutMs: number) {
    this.#timer = setTimeout(() => this.#expire(), timeoutMs)
  }

  #expire(): void {
    this.#fired = true
    this.#fire?.()
    this.#listener?.()
  }

  get expired(): Promise<'timeout'> {
    if (this.#expired === undefined) {
      this.#expired = this.#fired
        ? Promise.resolve('timeout')
        : new Promise((resolve) => {
            this.#fire = () => resolve('timeout')
          })
    }
    return this.#expired
  }

  /** The one reader of a body listens here (each read has its own deadline). */
  onExpire(listener: () => void): void {
    this.#listener = listener
  }

  clear(): void {
    clearTimeout(this.#timer)
  }
}

/** The part of a chunk past the body's free bytes, given the bytes received before it. */
function pacedBytes(before: number, chunk: number): number {
  return Math.max(0, before + chunk - Math.max(before, FREE_BODY_BYTES))
}

const EMPTY = new Uint8Array(0)
const encoder = new TextEncoder()
const ignore = () => {}

function isNodeReadable(source: unknown): source is Readable {
  return (
    typeof source === 'object' &&
    source !== null &&
    typeof (source as Readable).on === 'function' &&
    typeof (source as Readable).pause === 'function'
  )
}

function concat(chunks: readonly Uint8Array[], length: number): Uint8Array {
  if (chunks.length === 1) return chunks[0]! // a small body usually is one chunk: no copy
  return Buffer.concat(chunks, length)
}

/**
 * Reads a Node stream with its events (the fast path: an async iterator costs more per chunk). Past the limit it
 * stops listening and pauses the stream WITHOUT draining it: the caller answers 413 and closes the connection, so
 * a client cannot keep uploading into a refused request.
 */
function readNodeStream(
  stream: Readable,
  limitBytes: number,
  time: Deadline,
  count: (delta: number) => void,
  pace: LargeBodyPace | undefined,
): Promise<ReadBodyResult> {
  // Read from before, or ended: its 'end' would never come again, and waiting for it would hang the request.
  if (stream.readableDidRead || stream.readableEnded)
    return Promise.resolve({ ok: false, reason: 'consumed' })
  // Destroyed before a byte was read (the client left while a middleware in front was busy): no event will come.
  if (stream.destroyed) return Promise.resolve({ ok: false, reason: 'aborted', error: stream.errored })
  return new Promise((resolve) => {
    const chunks: Uint8Array[] = []
    let received = 0
    let settled = false
    let resume: ReturnType<typeof setTimeout> | undefined
    const settle = (result: ReadBodyResult) => {
      if (settled) return
      settled = true
      clearTimeout(resume)
      stream.off('data', onData)
      stream.off('end', onEnd)
      stream.off('close', onClose)
      stream.off('error', onError)
      resolve(result)
    }
    let kept = 0
    const drop = () => {
      count(-kept)
      kept = 0
      chunks.length = 0
    }
    const onData = (chunk: Buffer | string) => {
      const bytes = typeof chunk === 'string' ? Buffer.from(chunk) : chunk
      const paced = pace ? pacedBytes(received, bytes.length) : 0
      received += bytes.length
      if (received > limitBytes) {
        drop()
        stream.pause()
        settle({ ok: false, reason: 'too_large', unread: true })
        return
      }
      kept += bytes.length
      count(bytes.length)
      chunks.push(bytes)
      const waitMs = paced > 0 ? pace!.wait(paced) : 0
      if (waitMs > 0) {
        // Unread until its turn: the sender is held back by TCP meanwhile. 'end' cannot come while paused. A chunk
        // that came before the pause took effect has a later turn: its timer replaces the earlier one.
        stream.pause()
        clearTimeout(resume)
        resume = setTimeout(() => {
          if (!settled) stream.resume()
        }, waitMs)
      }
    }
    // Past the deadline the stream is left paused and unread, like a body past the limit: the answer closes it.
    time.onExpire(() => {
      if (settled) return
      drop()
      stream.pause()
      settle({ ok: false, reason: 'timeout' })
    })
    const onEnd = () => {
      if (!settled) count(-kept) // read in full: no longer in transit
      settle({ ok: true, body: chunks.length === 0 ? EMPTY : concat(chunks, received) })
    }
    const onClose = () => {
      if ((stream as { complete?: boolean }).complete === false || !stream.readableEnded) {
        if (!settled) drop()
        settle({ ok: false, reason: 'aborted' })
      }
    }
    const onError = (error: unknown) => {
      if (!settled) drop()
      settle({ ok: false, reason: 'aborted', error })
    }
    // A permanent no-op listener: a stream that errors after we stopped listening must not crash the process.
    stream.on('error', ignore)
    stream.on('data', onData)
    stream.on('end', onEnd)
    stream.on('close', onClose)
    stream.on('error', onError)
  })
}

/**
 * Reads chunks from `next` until it is done, the limit is passed or the deadline fires (then `stop` is called to
 * give the source up). Shared by web streams and async iterables.
 */
async function readChunks(
  next: () => Promise<IteratorResult<Uint8Array | string>>,
  stop: () => void,
  limitBytes: number,
  time: Deadline,
  count: (delta: number) => void,
  pace: LargeBodyPace | undefined,
): Promise<ReadBodyResult> {
  const chunks: Uint8Array[] = []
  let received = 0
  const fail = (result: ReadBodyResult): ReadBodyResult => {
    count(-received)
    stop()
    return result
  }
  try {
    for (;;) {
      const step = await Promise.race([next(), time.expired])
      if (step === 'timeout') return fail({ ok: false, reason: 'timeout' })
      if (step.done) break
      const bytes = typeof step.value === 'string' ? encoder.encode(step.value) : step.value
      if (received + bytes.byteLength > limitBytes) {
        return fail({ ok: false, reason: 'too_large', unread: true })
      }
      const paced = pace ? pacedBytes(received, bytes.byteLength) : 0
      received += bytes.byteLength
      count(bytes.byteLength)
      chunks.push(bytes)
      const waitMs = paced > 0 ? pace!.wait(paced) : 0
      // Not pulled until its turn (see large-body-pace.ts); the deadline still runs.
      if (waitMs > 0) {
        let timer: ReturnType<typeof setTimeout> | undefined
        const turn = new Promise<void>((resolve) => {
          timer = setTimeout(resolve, waitMs)
        })
        const outcome = await Promise.race([turn, time.expired])
        clearTimeout(timer)
        if (outcome === 'timeout') return fail({ ok: false, reason: 'timeout' })
      }
    }
  } catch (error) {
    count(-received)
    return { ok: false, reason: 'aborted', error }
  }
  count(-received) // read in full: no longer in transit
  return { ok: true, body: chunks.length === 0 ? EMPTY : concat(chunks, received) }
}

function readWebStream(
  stream: ReadableStream<Uint8Array>,
  limitBytes: number,
  time: Deadline,
  count: (delta: number) => void,
  pace: LargeBodyPace | undefined,
): Promise<ReadBodyResult> {
  // A stream another reader holds (a body read with request.json()) cannot be read again.
  if (stream.locked) return Promise.resolve({ ok: false, reason: 'consumed' })
  const reader = stream.getReader()
  const next = () => reader.read()
  return readChunks(next, () => void reader.cancel().catch(ignore), limitBytes, time, count, pace)
}

function readIterable(
  source: AsyncIterable<Uint8Array | string>,
  limitBytes: number,
  time: Deadline,
  count: (delta: number) => void,
  pace: LargeBodyPace | undefined,
): Promise<ReadBodyResult> {
  const iterator = source[Symbol.asyncIterator]()
  const stop = () => {
    try {
      Promise.resolve(iterator.return?.()).catch(ignore)
    } catch {
      // a generator still running cannot be returned from; it is left to the closed connection
    }
  }
  return readChunks(() => iterator.next(), stop, limitBytes, time, count, pace)
}

/**
 * The body of an HTTP request that has already arrived in full, taken from the stream's buffer in one synchronous
 * `read()` — no listeners, promise or timer. In full: Node's parser saw the message end (`complete`), or the buffer
 * holds exactly the `content-length` HTTP framed the body with (Node hands the body over before it marks the end).
 * A server that runs an async step before the handler (Fastify's hooks) hands the consumer such a request whenever
 * the body came with the headers.
 *
 * Undefined — read the stream as it comes — for anything else: a body still arriving, one over `limitBytes` or
 * {@link FREE_BODY_BYTES} (the limit and the pace then apply as they always do), a stream something read from,
 * resumed, ended or destroyed (the stream reader tells those apart).
 */
function arrivedBody(stream: Readable, limitBytes: number): Uint8Array | undefined {
  const length = stream.readableLength
  if (length > limitBytes || length > FREE_BODY_BYTES) return undefined
  const message = stream as { complete?: unknown; headers?: Record<string, unknown> }
  const whole =
    message.complete === true || (length > 0 && message.headers?.['content-length'] === String(length))
  if (!whole || stream.readableObjectMode || stream.readableFlowing === true) return undefined
  if (stream.readableDidRead || stream.readableEnded || stream.destroyed) return undefined
  const chunk: Buffer | string | null = stream.read()
  if (chunk === null) return EMPTY
  return typeof chunk === 'string' ? Buffer.from(chunk) : chunk
}

/**
 * Reads a {@link WholeBody}: its one read raced against the body's deadline, the limit checked and the pace kept as
 * for a stream that yields the body as one chunk.
 */
function readWhole(
  source: WholeBody,
  limitBytes: number,
  timeoutMs: number,
  count: (delta: number) => void,
  pace: LargeBodyPace | undefined,
): Promise<ReadBodyResult> {
  return new Promise((resolve) => {
    let settled = false
    let kept = 0
    let turn: ReturnType<typeof setTimeout> | undefined
    const settle = (result: ReadBodyResult) => {
      if (settled) return
      settled = true
      clearTimeout(timer)
      clearTimeout(turn)
      count(-kept)
      resolve(result)
    }
    const timer = setTimeout(() => settle({ ok: false, reason: 'timeout' }), timeoutMs)
    source.read().then(
      (bytes) => {
        if (settled) return
        if (bytes.byteLength > limitBytes) return settle({ ok: false, reason: 'too_large', unread: true })
        kept = bytes.byteLength
        count(kept)
        const paced = pace ? pacedBytes(0, kept) : 0
        const waitMs = paced > 0 ? pace!.wait(paced) : 0
        const body = kept === 0 ? EMPTY : bytes
        // Not handed on until its turn (see large-body-pace.ts); the deadline still runs.
        if (waitMs > 0) turn = setTimeout(() => settle({ ok: true, body }), waitMs)
        else settle({ ok: true, body })
      },
      (error: unknown) => settle({ ok: false, reason: 'aborted', error }),
    )
  })
}

/**
 * Reads a {@link BodySource} into one `Uint8Array`, refusing it as soon as it passes `limitBytes`: a huge or
 * endless body is never held in memory. A body still arriving after `timeoutMs` resolves as `timeout` and is given
 * up (a client trickling bytes holds neither memory nor a connection past that). A client that disconnects or a
 * stream that errors resolves as `aborted`, a source something else read before as `consumed`. Never throws.
 */
export async function readBody(
  source: BodySource | null | undefined,
  options: ReadBodyOptions,
): Promise<ReadBodyResult> {
  const { limitBytes, timeoutMs, pace } = options
  const count = options.onBytes ?? ignore
  if (source === null || source === undefined) return { ok: true, body: EMPTY }
  if (source instanceof Uint8Array) {
    return source.byteLength > limitBytes
      ? { ok: false, reason: 'too_large', unread: false }
      : { ok: true, body: source }
  }
  if (source instanceof WholeBody) return await readWhole(source, limitBytes, timeoutMs, count, pace)
  const nodeStream = isNodeReadable(source)
  if (nodeStream) {
    const arrived = arrivedBody(source, limitBytes)
    if (arrived !== undefined) {
      count(arrived.byteLength) // held for no time, but a peak all the same
      count(-arrived.byteLength)
      return { ok: true, body: arrived }
    }
  }
  const time = new Deadline(timeoutMs)
  try {
    if (nodeStream) return await readNodeStream(source, limitBytes, time, count, pace)
    if (typeof (source as ReadableStream).getReader === 'function') {
      return await readWebStream(source as ReadableStream<Uint8Array>, limitBytes, time, count, pace)
    }
    if (typeof (source as AsyncIterable<Uint8Array>)[Symbol.asyncIterator] === 'function') {
      return await readIterable(source as AsyncIterable<Uint8Array | string>, limitBytes, time, count, pace)
    }
  } finally {
    time.clear()
  }
  return {
    ok: false,
    reason: 'aborted',
    error: new TypeError(
      'request.body must be a Uint8Array, an async iterable of chunks or a ReadableStream',
    ),
  }
}
