import type { Dispatcher } from 'undici'
import type { Clock } from './runtime.js'

/** How one POST ended at the HTTP level, before the relay decides what it means. */
export type WebhookResponse =
  | {
      readonly kind: 'answered'
      readonly status: number
      readonly body: string
      readonly retryAfter?: string
    }
  | { readonly kind: 'timed out' }
  | { readonly kind: 'aborted' }
  | { readonly kind: 'network error'; readonly error: Error }

/**
 * The most of an answer's body that is kept: enough for `{"status":"applied"}` and for the 500 characters of an
 * error kept as `last_error`. Reading stops there: the connection is closed rather than drained, so an endpoint that
 * streams an endless (or merely huge) answer costs at most these bytes plus one chunk, and no more time.
 */
export const MAX_KEPT_BODY_BYTES = 16 * 1024

/** A request in flight that can be cut short (a stop, or its timeout). */
export interface AbortableRequest {
  abort(): void
}

/** What every request of one sender shares: built once per sender, so a request allocates no settings of its own. */
export interface WebhookTransport {
  /** A keep-alive undici dispatcher (the sender's pool). */
  readonly dispatcher: Dispatcher
  /** Bounds the whole exchange: connect, send, headers and body. */
  readonly timeoutMs: number
  readonly clock: Clock
  /** Called with each request while it is in flight, so a stop can abort it; returns the function that forgets it. */
  readonly track: (request: AbortableRequest) => () => void
}

/**
 * POSTs one body on the transport's keep-alive undici dispatcher, through its low-level `dispatch` API, and
 * resolves with how it ended; never rejects. `timeoutMs` bounds the whole exchange (connect, send, headers and
 * body), so a request never outlives the lease that covers it. `track` is called with the request while it is in
 * flight, so a stop can abort it; it returns the function that forgets it.
 *
 * Why `dispatch` and not `request`: `request` wraps every answer in a Readable stream and every call in an
 * AbortSignal with its listeners — on a fast endpoint about a tenth of the relay's CPU, for a body the relay reads
 * whole and mostly ignores. This handler collects at most {@link MAX_KEPT_BODY_BYTES} and aborts through the
 * controller undici hands it.
 *
 * Once the status line arrived, the status decides: an answer cut short — its body longer than what is kept, or
 * still arriving at the timeout or a stop — resolves as `answered` with that status and the bytes kept. A 2xx is
 * then a delivery (the consumer applied the event before answering), never a "timed out" that would send it again.
 * Cutting an answer short destroys its connection (undici never hands a half-read socket back to the pool).
 */
export function postWebhook(
  transport: WebhookTransport,
  url: URL,
  headers: Record<string, string>,
  body: string,
): Promise<WebhookResponse> {
  const { dispatcher, timeoutMs, clock, track } = transport
  return new Promise((resolve) => {
    let controller: Dispatcher.DispatchController | undefined
    /** Why this request was cut short, once it was: kept until undici hands over its controller. */
    let cutShort: 'timed out' | 'aborted' | undefined
    let status = 0
    let retryAfter: string | undefined
    const chunks: Buffer[] = []
    let kept = 0
    let settled = false

    /** The answer as far as it was read: its status, and the body bytes kept. */
    const answered = (): WebhookResponse => {
      const text = (chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks)).toString('utf8')
      return retryAfter === undefined
        ? { kind: 'answered', status, body: text }
        : { kind: 'answered', status, body: text, retryAfter }
    }
    const cut = (why: 'timed out' | 'aborted') => {
      if (settled || cutShort) return
      cutShort = why
      // The status line is in: the outcome is decided; only the rest of the body is given up.
      if (status !== 0) settle(answered())
      controller?.abort(new Error(why))
    }
    const timer = clock.setTimeout(() => cut('timed out'), timeoutMs)
    const forget = track({ abort: () => cut('aborted') })
    const settle = (response: WebhookResponse) => {
      if (settled) return
      settled = true
      clock.clearTimeout(timer)
      forget()
      resolve(response)
    }

    const handler: Dispatcher.DispatchHandler = {
      onRequestStart(started) {
        controller = started
        if (cutShort) started.abort(new Error(cutShort))
      },
      onResponseStart(_controller, statusCode, responseHeaders) {
        // 1xx informational answers come before the real one.
        if (statusCode < 200) return
        status = statusCode
        const value = responseHeaders['retry-after']
        retryAfter = Array.isArray(value) ? value[0] : value
      },
      onResponseData(dataController, chunk) {
        if (settled) return
        const room = MAX_KEPT_BODY_BYTES - kept
        chunks.push(chunk.length > room ? chunk.subarray(0, room) : chunk)
        kept += Math.min(chunk.length, room)
        if (kept < MAX_KEPT_BODY_BYTES) return
        // Everything after this would be dropped: reading on until the body ends (never, for an endless one) or the
        // timeout only spends bandwidth and the slot — and a timeout would turn a 2xx into a failed attempt.
        settle(answered())
        dataController.abort(new Error('answer longer than the relay keeps'))
      },
      onResponseEnd() {
        settle(answered())
      },
      onResponseError(_controller, error) {
        settle(cutShort ? { kind: cutShort } : { kind: 'network error', error })
      },
    }

    try {
      dispatcher.dispatch(
        { origin: url.origin, path: url.pathname + url.search, method: 'POST', headers, body },
        handler,
      )
    } catch (error) {
      // An invalid request (a header value undici refuses, a closed dispatcher) is thrown synchronously.
      settle({ kind: 'network error', error: error instanceof Error ? error : new Error(String(error)) })
    }
  })
}
