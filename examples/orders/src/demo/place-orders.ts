import { Agent, request } from 'node:http'
import type { OrderStatus } from '../order-events.js'

/** The status changes an order goes through after it is placed, in order. */
export const STATUS_FLOW: readonly OrderStatus[] = ['paid', 'packed', 'shipped', 'delivered']

/** Options of {@link placeOrders}. */
export interface PlaceOrdersOptions {
  /** The orders service, e.g. `http://127.0.0.1:3000`. */
  readonly ordersUrl: string
  readonly orders: number
  /** Status changes per order, each after the previous one answered. */
  readonly updates: number
  /** Orders in progress at once. */
  readonly concurrency: number
  readonly random: () => number
  /** Stops starting new requests. */
  readonly signal: AbortSignal
}

/** How far {@link placeOrders} got; updated as it goes, for the progress line. */
export interface PlaceOrdersProgress {
  ordersPlaced: number
  statusChanges: number
  /** Requests the orders service did not answer with 2xx (should stay 0). */
  errors: number
  /** The first few of those, for the report. */
  readonly errorSamples: string[]
}

const CUSTOMERS = [
  'ada',
  'grace',
  'edsger',
  'barbara',
  'donald',
  'frances',
  'ken',
  'margaret',
  'niklaus',
  'tony',
]

/**
 * Plays the orders service's clients: places `orders` orders, `concurrency` at a time, and walks each through
 * `updates` status changes, one after the other — so each order's events are created in a known order, while
 * different orders interleave freely.
 */
export async function placeOrders(options: PlaceOrdersOptions, progress: PlaceOrdersProgress): Promise<void> {
  const agent = new Agent({ keepAlive: true, maxSockets: options.concurrency })
  let next = 0
  const fail = (what: string) => {
    progress.errors += 1
    if (progress.errorSamples.length < 5) progress.errorSamples.push(what)
  }
  const worker = async () => {
    while (next < options.orders && !options.signal.aborted) {
      next += 1
      const created = await postJson(agent, `${options.ordersUrl}/orders`, 'POST', {
        customer: CUSTOMERS[Math.floor(options.random() * CUSTOMERS.length)],
        totalCents: 100 + Math.floor(options.random() * 99_900),
      }).catch((error: unknown) => ({ status: 0, body: String(error) }))
      const id = (created.body as { order?: { id?: unknown } } | undefined)?.order?.id
      if (created.status !== 201 || typeof id !== 'string') {
        fail(`POST /orders → ${created.status} ${JSON.stringify(created.body)}`)
        continue
      }
      progress.ordersPlaced += 1
      for (const status of STATUS_FLOW.slice(0, options.updates)) {
        if (options.signal.aborted) return
        const changed = await postJson(agent, `${options.ordersUrl}/orders/${id}/status`, 'PATCH', {
          status,
        }).catch((error: unknown) => ({ status: 0, body: String(error) }))
        if (changed.status !== 200) {
          fail(`PATCH /orders/${id}/status → ${changed.status} ${JSON.stringify(changed.body)}`)
          break
        }
        progress.statusChanges += 1
      }
    }
  }
  try {
    await Promise.all(Array.from({ length: Math.min(options.concurrency, options.orders) }, worker))
  } finally {
    agent.destroy()
  }
}

function postJson(
  agent: Agent,
  url: string,
  method: 'POST' | 'PATCH',
  body: unknown,
): Promise<{ status: number; body: unknown }> {
  const payload = JSON.stringify(body)
  return new Promise((resolve, reject) => {
    const req = request(
      url,
      {
        method,
        agent,
        headers: { 'content-type': 'application/json', 'content-length': Buffer.byteLength(payload) },
        timeout: 30_000,
      },
      (res) => {
        const chunks: Buffer[] = []
        res.on('data', (chunk: Buffer) => chunks.push(chunk))
        res.on('error', reject)
        res.on('end', () => {
          const text = Buffer.concat(chunks).toString('utf8')
          let parsed: unknown = text
          try {
            parsed = JSON.parse(text)
          } catch {
            // not JSON: keep the text for the error message
          }
          resolve({ status: res.statusCode ?? 0, body: parsed })
        })
      },
    )
    req.on('timeout', () => req.destroy(new Error('no answer within 30 s')))
    req.on('error', reject)
    req.end(payload)
  })
}
