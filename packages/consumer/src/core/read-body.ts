import type { Readable } from 'node:stream'

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
  | { readonly ok: false; readonly reason: 'aborted'; readonly error?: unknown }
  | { readonly ok: false; readonly reason: 'consumed' }

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
function readNodeStream(stream: Readable, limitBytes: number): Promise<ReadBodyResult> {
  // Read from before, or ended: its 'end' would never come again, and waiting for it would hang the request.
  if (stream.readableDidRead || stream.readableEnded)
    return Promise.resolve({ ok: false, reason: 'consumed' })
  // Destroyed before a byte was read (the client left while a middleware in front was busy): no event will come.
  if (stream.destroyed) return Promise.resolve({ ok: false, reason: 'aborted', error: stream.errored })
  return new Promise((resolve) => {
    const chunks: Uint8Array[] = []
    let received = 0
    let settled = false
    const settle = (result: ReadBodyResult) => {
      if (settled) return
      settled = true
      stream.off('data', onData)
      stream.off('end', onEnd)
      stream.off('close', onClose)
      stream.off('error', onError)
      resolve(result)
    }
    const onData = (chunk: Buffer | string) => {
      const bytes = typeof chunk === 'string' ? Buffer.from(chunk) : chunk
      received += bytes.length
      if (received > limitBytes) {
        chunks.length = 0
        stream.pause()
        settle({ ok: false, reason: 'too_large', unread: true })
        return
      }
      chunks.push(bytes)
    }
    const onEnd = () => settle({ ok: true, body: chunks.length === 0 ? EMPTY : concat(chunks, received) })
    const onClose = () => {
      if ((stream as { complete?: boolean }).complete === false || !stream.readableEnded) {
        settle({ ok: false, reason: 'aborted' })
      }
    }
    const onError = (error: unknown) => settle({ ok: false, reason: 'aborted', error })
    // A permanent no-op listener: a stream that errors after we stopped listening must not crash the process.
    stream.on('error', ignore)
    stream.on('data', onData)
    stream.on('end', onEnd)
    stream.on('close', onClose)
    stream.on('error', onError)
  })
}

async function readWebStream(
  stream: ReadableStream<Uint8Array>,
  limitBytes: number,
): Promise<ReadBodyResult> {
  // A stream another reader holds (a body read with request.json()) cannot be read again.
  if (stream.locked) return { ok: false, reason: 'consumed' }
  const reader = stream.getReader()
  const chunks: Uint8Array[] = []
  let received = 0
  try {
    for (;;) {
      const { done, value } = await reader.read()
      if (done) break
      received += value.byteLength
      if (received > limitBytes) {
        reader.cancel().catch(ignore)
        return { ok: false, reason: 'too_large', unread: true }
      }
      chunks.push(value)
    }
  } catch (error) {
    return { ok: false, reason: 'aborted', error }
  }
  return { ok: true, body: chunks.length === 0 ? EMPTY : concat(chunks, received) }
}

async function readIterable(
  source: AsyncIterable<Uint8Array | string>,
  limitBytes: number,
): Promise<ReadBodyResult> {
  const iterator = source[Symbol.asyncIterator]()
  const chunks: Uint8Array[] = []
  let received = 0
  try {
    for (;;) {
      const { done, value } = await iterator.next()
      if (done) break
      const bytes = typeof value === 'string' ? encoder.encode(value) : value
      received += bytes.byteLength
      if (received > limitBytes) {
        Promise.resolve(iterator.return?.()).catch(ignore)
        return { ok: false, reason: 'too_large', unread: true }
      }
      chunks.push(bytes)
    }
  } catch (error) {
    return { ok: false, reason: 'aborted', error }
  }
  return { ok: true, body: chunks.length === 0 ? EMPTY : concat(chunks, received) }
}

/**
 * Reads a {@link BodySource} into one `Uint8Array`, refusing it as soon as it passes `limitBytes`: a huge or
 * endless body is never held in memory. A client that disconnects or a stream that errors resolves as `aborted`,
 * a source something else read before as `consumed`. Never throws.
 */
export function readBody(source: BodySource | null | undefined, limitBytes: number): Promise<ReadBodyResult> {
  if (source === null || source === undefined) return Promise.resolve({ ok: true, body: EMPTY })
  if (source instanceof Uint8Array) {
    return Promise.resolve(
      source.byteLength > limitBytes
        ? { ok: false, reason: 'too_large', unread: false }
        : { ok: true, body: source },
    )
  }
  if (isNodeReadable(source)) return readNodeStream(source, limitBytes)
  if (typeof (source as ReadableStream).getReader === 'function') {
    return readWebStream(source as ReadableStream<Uint8Array>, limitBytes)
  }
  if (typeof (source as AsyncIterable<Uint8Array>)[Symbol.asyncIterator] === 'function') {
    return readIterable(source as AsyncIterable<Uint8Array | string>, limitBytes)
  }
  return Promise.resolve({
    ok: false,
    reason: 'aborted',
    error: new TypeError(
      'request.body must be a Uint8Array, an async iterable of chunks or a ReadableStream',
    ),
  })
}
