import type { IncomingMessage } from 'node:http'

/**
 * True when something (usually `express.json()`) has already read or replaced the request body, so the exact
 * bytes a signature covers are gone. Checks the stream itself (read from or ended), the flag body-parser 1.x
 * sets, and a `req.body` that is more than the `{}` placeholder Express 4 parsers leave on requests they skip.
 */
export function isBodyConsumed(req: IncomingMessage & { body?: unknown; _body?: unknown }): boolean {
  if (req.readableDidRead || req.readableEnded || req._body === true) return true
  const body = req.body
  if (body === undefined || body === null) return false
  const isEmptyObject =
    typeof body === 'object' &&
    Object.getPrototypeOf(body) === Object.prototype &&
    Object.keys(body).length === 0
  return !isEmptyObject
}

/**
 * Why a `content-type` is refused, or undefined when it is JSON in UTF-8. Only `application/json` is the
 * contract; a charset other than UTF-8 is refused rather than guessed at, since the signature covers bytes.
 */
export function contentTypeProblem(header: string | undefined): string | undefined {
  if (header === 'application/json') return undefined // what the relay sends: skip the parsing below
  if (header === undefined || header.trim() === '')
    return 'the content-type header is missing; send application/json'
  const [mediaType = '', ...parameters] = header.split(';')
  if (mediaType.trim().toLowerCase() !== 'application/json') {
    return 'the content-type must be application/json'
  }
  for (const parameter of parameters) {
    const [name = '', value = ''] = parameter.split('=')
    if (name.trim().toLowerCase() !== 'charset') continue
    const charset = value
      .trim()
      .replace(/^"(.*)"$/, '$1')
      .toLowerCase()
    if (charset !== 'utf-8' && charset !== 'utf8') return 'the charset must be utf-8'
  }
  return undefined
}

/** The outcome of {@link readRawBody}. */
export type ReadBodyResult =
  | { readonly ok: true; readonly body: Buffer }
  | { readonly ok: false; readonly reason: 'too_large'; readonly receivedBytes: number }
  | { readonly ok: false; readonly reason: 'aborted'; readonly error?: unknown }

const ignore = () => {}

/**
 * Reads the request body into one Buffer, refusing it as soon as it passes `limitBytes`.
 *
 * The limit is enforced while streaming, so a huge (or endless, chunked) body is never held in memory: past the
 * limit the chunks read so far are dropped, the rest of the stream is drained and discarded, and the caller
 * answers 413 at once. A client that disconnects mid-body resolves as `aborted`.
 */
export function readRawBody(req: IncomingMessage, limitBytes: number): Promise<ReadBodyResult> {
  return new Promise((resolve) => {
    const chunks: Buffer[] = []
    let received = 0
    let settled = false
    const settle = (result: ReadBodyResult) => {
      if (settled) return
      settled = true
      req.off('data', onData)
      req.off('end', onEnd)
      req.off('close', onClose)
      req.off('error', onError)
      resolve(result)
    }
    const onData = (chunk: Buffer) => {
      received += chunk.length
      if (received > limitBytes) {
        chunks.length = 0
        settle({ ok: false, reason: 'too_large', receivedBytes: received })
        // Keep the stream flowing with no listener: Node discards the rest instead of buffering it.
        req.resume()
        return
      }
      chunks.push(chunk)
    }
    // One chunk (a small body usually is) needs no copy.
    const onEnd = () =>
      settle({ ok: true, body: chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks, received) })
    const onClose = () => {
      if (!req.complete) settle({ ok: false, reason: 'aborted' })
    }
    const onError = (error: unknown) => settle({ ok: false, reason: 'aborted', error })
    // A permanent no-op listener: an aborted request after we stopped listening must not become an uncaught error.
    req.on('error', ignore)
    req.on('data', onData)
    req.on('end', onEnd)
    req.on('close', onClose)
    req.on('error', onError)
  })
}
