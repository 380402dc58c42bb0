import { randomBytes } from 'node:crypto'
import type { AddressInfo } from 'node:net'
import { performance } from 'node:perf_hooks'
import { Worker } from 'node:worker_threads'
import { createConsumer } from '@outbox/consumer'
import { parseSigningSecrets, signWebhook, silentLogger } from '@outbox/protocol'
import { openKysely } from '@outbox/test-harness'
import express from 'express'
import { sql } from 'kysely'
import { Agent, request } from 'undici'
import type { BenchContext } from '../support/context.js'
import { type CaseResult, compare, measurement } from '../support/report.js'
import { median, percentile } from '../support/stats.js'
import { now, sleep } from '../support/timing.js'
import { buildWebhooks, createConsumerTemplate } from '../support/webhooks.js'

const AGGREGATES = 1000
/** Offered rate of the real deliveries, as in the latency case: steady, so their latency is what is compared. */
const RATE = 200
/** Exactly the consumer's default `maxBodyBytes`: a forged body that passes the size check and must be read. */
const FORGED_BYTES = 1_048_576
/** Real deliveries sent before the measured windows of each run. */
const WARM_UP = 100

type Flood = 'none' | 'unsigned' | 'bad-signature'
const FLOODS: readonly Flood[] = ['none', 'unsigned', 'bad-signature']
const LABELS: Record<Flood, string> = {
  none: 'no flood',
  unsigned: 'unsigned 1 MiB flood',
  'bad-signature': 'bad-signature 1 MiB flood',
}

/**
 * The flood, in a worker thread (its own event loop, so sending 1 MiB bodies costs the consumer's thread nothing
 * but what the consumer itself does with them): `concurrency` loops, each POSTing a 1 MiB JSON body again and
 * again over `node:http` — with no signature headers (`unsigned`), or with well-formed Standard Webhooks headers
 * and a wrong signature (`bad-signature`), which the consumer can only refuse after reading and hashing the body.
 * Every refusal, error or closed connection just starts the next request; on 'stop' it reports its counts.
 */
const FLOOD_WORKER = `
const http = require('node:http')
const { randomUUID, randomBytes } = require('node:crypto')
const { parentPort, workerData } = require('node:worker_threads')
const { url, mode, concurrency, bytes } = workerData
const prefix = '{"pad":"'
const body = Buffer.alloc(bytes, 'a')
body.write(prefix, 0)
body.write('"}', bytes - 2)
const agent = new http.Agent({ keepAlive: true, maxSockets: concurrency })
let stopping = false
const counts = { sent: 0, answered: {}, errors: 0 }
function once() {
  return new Promise((resolve) => {
    const headers = { 'content-type': 'application/json', 'content-length': String(bytes) }
    if (mode === 'bad-signature') {
      headers['webhook-id'] = randomUUID()
      headers['webhook-timestamp'] = String(Math.floor(Date.now() / 1000))
      headers['webhook-signature'] = 'v1,' + randomBytes(32).toString('base64')
    }
    counts.sent++
    const req = http.request(url, { method: 'POST', headers, agent }, (res) => {
      counts.answered[res.statusCode] = (counts.answered[res.statusCode] || 0) + 1
      res.resume()
      res.on('end', resolve)
      res.on('error', resolve)
    })
    req.on('error', () => { counts.errors++; resolve() })
    req.end(body)
  })
}
const loops = Array.from({ length: concurrency }, async () => { while (!stopping) await once() })
parentPort.on('message', async () => {
  stopping = true
  await Promise.all(loops)
  agent.destroy()
  parentPort.postMessage(counts)
})
parentPort.postMessage('started')
`

interface FloodCounts {
  readonly sent: number
  readonly answered: Record<string, number>
  readonly errors: number
}

async function startFlood(
  url: string,
  mode: Exclude<Flood, 'none'>,
  concurrency: number,
): Promise<() => Promise<FloodCounts>> {
  const worker = new Worker(FLOOD_WORKER, {
    eval: true,
    workerData: { url, mode, concurrency, bytes: FORGED_BYTES },
  })
  const messages: unknown[] = []
  let wake: (() => void) | undefined
  worker.on('message', (message) => {
    messages.push(message)
    wake?.()
  })
  const failed = new Promise<never>((_, reject) => worker.once('error', reject))
  const next = async () => {
    while (messages.length === 0) await Promise.race([new Promise<void>((r) => (wake = r)), failed])
    return messages.shift()
  }
  await next() // 'started'
  return async () => {
    worker.postMessage('stop')
    const counts = (await next()) as FloodCounts
    await worker.terminate()
    return counts
  }
}

/**
 * Sends `events` at a steady `RATE` per second, each signed as the relay signs it, without waiting for earlier
 * answers; returns each one's latency from its scheduled send time to its answer (ms), so a stalled event loop
 * counts in full. Every answer must be 200. `allSent` runs once the last one is sent (the flood stops there, so
 * a window lasts its offered time plus the drain of what is queued, however slow the flood made the consumer).
 */
async function deliver(
  agent: Agent,
  url: string,
  keys: ReturnType<typeof parseSigningSecrets>,
  events: ReturnType<typeof buildWebhooks>,
  allSent: () => Promise<unknown> = async () => {},
): Promise<number[]> {
  const latencies: number[] = []
  const pending: Promise<void>[] = []
  const t0 = now()
  for (let i = 0; i < events.length; i++) {
    const due = t0 + (i * 1000) / RATE
    const wait = due - now()
    if (wait > 0) await sleep(wait)
    const { eventId, body, headers } = events[i]!
    pending.push(
      (async () => {
        const signed = { ...headers, ...signWebhook(keys, { eventId, body }) }
        const response = await request(url, { method: 'POST', body, headers: signed, dispatcher: agent })
        const text = await response.body.text()
        if (response.statusCode !== 200) {
          throw new Error(`a real delivery was answered ${response.statusCode} ${text.slice(0, 200)}`)
        }
        latencies.push(now() - due)
      })(),
    )
  }
  await allSent()
  await Promise.all(pending)
  return latencies
}

/**
 * Forged requests: the p50 and p99 latency of real, signed deliveries offered at a steady 200 events/s to a signed
 * consumer (`dedupe` on Express, `secret` set), alone and while a flood of forged 1 MiB POSTs hits the same
 * endpoint — unsigned ones (refused on their headers, body unread, connection closed) or ones with a wrong
 * signature (read, hashed, refused). Reported only. The three conditions take turns within each run, in rotating
 * order, on a fresh database per run.
 */
export async function forgedFlood(ctx: BenchContext): Promise<CaseResult> {
  const perWindow = ctx.quick ? 200 : 2000
  const concurrency = ctx.quick ? 2 : 8
  const secret = `whsec_${randomBytes(32).toString('base64')}`
  const keys = parseSigningSecrets(secret)
  const latencies = new Map<Flood, { p50: number[]; p99: number[] }>()
  const floodRates = new Map<Flood, number[]>()
  const busyShares = new Map<Flood, number[]>()
  const template = await createConsumerTemplate(ctx.databases, AGGREGATES)
  try {
    for (let run = 0; run < ctx.runs; run++) {
      const name = await ctx.databases.create('run', template)
      const db = openKysely(ctx.databases.url(name), { max: 10 })
      // Silent, as the relay is in every case: a logged line per forged request would be the logger's cost.
      const { dedupe } = createConsumer({ db, secret, logger: silentLogger })
      const app = express()
      app.post(
        '/hooks',
        dedupe<{ order_id: string; status: string }>(async (event, trx) => {
          await sql`UPDATE orders SET status = ${event.data.status} WHERE id = ${event.data.order_id}`.execute(
            trx,
          )
        }),
      )
      const server = app.listen(0, '127.0.0.1')
      await new Promise<void>((resolve) => server.once('listening', () => resolve()))
      const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/hooks`
      const agent = new Agent({ connections: 16, keepAliveTimeout: 30_000, pipelining: 1 })
      try {
        // Warm-up, not measured: the first window of a run would otherwise also pay for compiling the code.
        await deliver(agent, url, keys, buildWebhooks(WARM_UP, AGGREGATES))
        for (let w = 0; w < FLOODS.length; w++) {
          const flood = FLOODS[(run + w) % FLOODS.length]!
          // Each window continues the sequences of the one before: every real delivery is a new event, in order.
          const events = buildWebhooks(perWindow, AGGREGATES, WARM_UP + w * perWindow)
          const stop = flood === 'none' ? undefined : await startFlood(url, flood, concurrency)
          const started = now()
          const elu = performance.eventLoopUtilization()
          let counts: FloodCounts | undefined
          let seconds = 0
          // The event loop's share is taken over the offered time only, while the flood runs.
          let busy = 0
          const window = await deliver(agent, url, keys, events, async () => {
            busy = performance.eventLoopUtilization(elu).utilization
            counts = await stop?.()
            seconds = (now() - started) / 1000
          })
          const entry = latencies.get(flood) ?? { p50: [], p99: [] }
          entry.p50.push(percentile(window, 50))
          entry.p99.push(percentile(window, 99))
          latencies.set(flood, entry)
          busyShares.set(flood, [...(busyShares.get(flood) ?? []), busy])
          if (counts !== undefined) {
            const refused = Object.entries(counts.answered)
              .filter(([status]) => status !== '200')
              .reduce((sum, [, n]) => sum + n, 0)
            if ((counts.answered['200'] ?? 0) > 0)
              throw new Error(`a forged request was accepted: ${JSON.stringify(counts)}`)
            floodRates.set(flood, [...(floodRates.get(flood) ?? []), (refused + counts.errors) / seconds])
          }
          ctx.log(
            `  ${LABELS[flood]}: p50 ${entry.p50.at(-1)!.toFixed(2)} ms, p99 ${entry.p99.at(-1)!.toFixed(2)} ms, event loop ${(busy * 100).toFixed(0)} % busy${counts ? `, forged ${JSON.stringify(counts)}` : ''}`,
          )
        }
      } finally {
        await agent.close()
        server.closeAllConnections()
        await new Promise<void>((resolve) => server.close(() => resolve()))
        await db.destroy()
        await ctx.databases.drop(name)
      }
    }
  } finally {
    await ctx.databases.drop(template)
  }
  const p99 = (flood: Flood) => median(latencies.get(flood)!.p99)
  return {
    id: 'forged-flood',
    title: `Forged requests: real deliveries at ${RATE}/s (${perWindow} per window) to a signed consumer, with and without ${concurrency} concurrent forged 1 MiB POSTs`,
    measurements: [
      ...FLOODS.flatMap((flood) => [
        measurement(`real deliveries p50, ${LABELS[flood]}`, 'ms', latencies.get(flood)!.p50),
        measurement(`real deliveries p99, ${LABELS[flood]}`, 'ms', latencies.get(flood)!.p99),
      ]),
      ...FLOODS.map((flood) =>
        measurement(`consumer's event loop busy, ${LABELS[flood]}`, 'share', busyShares.get(flood)!),
      ),
      ...[...floodRates.entries()].map(([flood, runs]) =>
        measurement(`forged requests refused, ${LABELS[flood]}`, 'req/s', runs),
      ),
    ],
    comparisons: [
      // A client without the secret must not push real deliveries' p99 to seconds: ≤ 20× its value without.
      compare('p99 with unsigned flood ÷ without', p99('unsigned'), p99('none'), { max: 20 }),
      compare('p99 with bad-signature flood ÷ without', p99('bad-signature'), p99('none'), { max: 20 }),
    ],
    notes: [
      'consumer: Express dedupe(handler) with a signing secret and a silent logger; real deliveries signed like the relay (Standard Webhooks); latency from each delivery’s scheduled send time to its answer',
      'the flood runs in a worker thread over node:http keep-alive; unsigned requests are refused on their headers (401, connection closed, body unread), bad-signature ones after the body is read and its HMAC checked',
    ],
    seconds: 0,
  }
}
