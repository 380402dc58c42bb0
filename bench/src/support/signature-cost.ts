// What one forged request costs a consumer's event loop in signature checking alone: `verifyWebhook` over a
// 1 MiB body whose headers are well-formed and fresh but whose signature is wrong — the request a flood of
// forgeries is made of, since it passes every header check and forces one HMAC over the whole body. The check is
// synchronous, so its wall time is the time the event loop is held.
//
// In the same run, interleaved run by run so drift on the machine hits both alike, the same verification by the
// public `standardwebhooks` package (`Webhook.verify`, pure-JS SHA-256): the reference the ratio is taken
// against. Reports medians and their ratio; absolute numbers are context.
//
//   pnpm exec tsx --conditions=@outbox/source bench/src/support/signature-cost.ts [--runs=200] [--bytes=1048576]
import { randomBytes, randomUUID } from 'node:crypto'
import { cpus } from 'node:os'
import { parseSigningSecrets, verifyWebhook } from '@outbox/protocol'
import { Webhook } from 'standardwebhooks'
import { median, percentile, round } from './stats.js'

function numberArgument(name: string, fallback: number): number {
  const given = process.argv.find((arg) => arg.startsWith(`--${name}=`))
  if (given === undefined) return fallback
  const value = Number(given.slice(name.length + 3))
  if (!Number.isInteger(value) || value < 1) throw new Error(`--${name} must be a positive integer`)
  return value
}

const runs = numberArgument('runs', 200)
const bytes = numberArgument('bytes', 1024 * 1024)
const WARM_UP = 10

const secret = `whsec_${randomBytes(32).toString('base64')}`
const keys = parseSigningSecrets(secret)
const oracle = new Webhook(secret)
// A JSON envelope padded to exactly `bytes`: what a consumer would have read in before verifying.
const head = `{"event_id":"${randomUUID()}","type":"order.updated","data":{"blob":"`
const body = Buffer.from(`${head}${'x'.repeat(Math.max(0, bytes - head.length - 3))}"}}`)
if (body.length !== bytes) throw new Error(`body is ${body.length} bytes, wanted ${bytes}`)

/** Fresh, well-formed headers with a random (so wrong) signature: nothing refuses them before the HMAC. */
function forgedHeaders(): Record<string, string> {
  return {
    'webhook-id': randomUUID(),
    'webhook-timestamp': String(Math.floor(Date.now() / 1000)),
    'webhook-signature': `v1,${randomBytes(32).toString('base64')}`,
  }
}

function timeOurs(): number {
  const headers = forgedHeaders()
  const started = performance.now()
  const result = verifyWebhook(keys, headers, body)
  const elapsed = performance.now() - started
  if (result.ok || result.reason !== 'invalid_signature') {
    throw new Error(`verifyWebhook answered ${JSON.stringify(result)} to a forged signature`)
  }
  return elapsed
}

function timeOracle(): number {
  const headers = forgedHeaders()
  const started = performance.now()
  let refused = false
  try {
    oracle.verify(body, headers)
  } catch {
    refused = true
  }
  const elapsed = performance.now() - started
  if (!refused) throw new Error('Webhook.verify accepted a forged signature')
  return elapsed
}

const ours: number[] = []
const theirs: number[] = []
for (let run = 0; run < WARM_UP + runs; run++) {
  // Alternate which goes first, so neither always runs right after the other's garbage.
  let mine: number
  let reference: number
  if (run % 2 === 0) {
    mine = timeOurs()
    reference = timeOracle()
  } else {
    reference = timeOracle()
    mine = timeOurs()
  }
  if (run < WARM_UP) continue
  ours.push(mine)
  theirs.push(reference)
}

const line = (name: string, samples: readonly number[]) =>
  `  ${name.padEnd(40)} median ${String(round(median(samples))).padStart(7)} ms   p90 ${String(round(percentile(samples, 90))).padStart(7)} ms   min ${String(round(Math.min(...samples))).padStart(7)} ms`
console.log(
  `verify of a forged ${bytes}-byte body (fresh headers, wrong signature): ${runs} runs each after ${WARM_UP} warm-up, interleaved`,
)
console.log(`  ${cpus().length} × ${cpus()[0]?.model ?? 'unknown CPU'}, Node ${process.version}`)
console.log(line('@outbox/protocol verifyWebhook', ours))
console.log(line('standardwebhooks 1.1.1 Webhook.verify', theirs))
console.log(`  ratio of medians (standardwebhooks ÷ verifyWebhook): ${round(median(theirs) / median(ours))}×`)
