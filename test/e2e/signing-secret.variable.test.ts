// One name for the signing secret everywhere a reader meets it: `OUTBOX_SECRET`, the variable `outbox relay` reads.
// The orders example's services, run alone as its README shows, take it on both sides, so a reader who exports it
// once gets signed deliveries the subscriber accepts; and no README, snippet, TSDoc example or deploy file of the
// repository names the secret any other way.
import { execFileSync, spawn } from 'node:child_process'
import { randomBytes } from 'node:crypto'
import { readFileSync } from 'node:fs'
import { join, resolve } from 'node:path'
import { fileURLToPath } from 'node:url'
import { useTestDatabase } from '@outbox/test-harness'
import { afterAll, describe, expect, it } from 'vitest'

const ROOT = resolve(fileURLToPath(new URL('../..', import.meta.url)))
const EXAMPLE = join(ROOT, 'examples/orders')
const orders = useTestDatabase()
const subscriber = useTestDatabase()
const secret = `whsec_${randomBytes(32).toString('base64')}`

/** A running service of the example and what it printed so far. */
interface Service {
  readonly output: () => string
  /** Resolves with the first capture of `pattern` in the output; rejects if the process ends first. */
  readonly waitFor: (pattern: RegExp) => Promise<string>
  /** Resolves with the exit code once the process has ended. */
  readonly exited: Promise<number | null>
  readonly stop: () => Promise<number | null>
}

const started: Service[] = []

afterAll(async () => {
  await Promise.all(started.map((service) => service.stop()))
})

/**
 * Starts one of the example's package scripts (`orders-service`, `relay`, `subscriber`) with the command its
 * package.json gives pnpm, from the example's folder, with only the variables given beside PATH: nothing from the
 * test's own environment can stand in for a setting the README tells the reader to export.
 */
function startScript(script: string, env: Record<string, string>): Service {
  const scripts = JSON.parse(readFileSync(join(EXAMPLE, 'package.json'), 'utf8')).scripts as Record<
    string,
    string
  >
  const [command, ...args] = scripts[script]!.split(' ')
  expect(command).toBe('node')
  const child = spawn(process.execPath, args, {
    cwd: EXAMPLE,
    env: { PATH: process.env.PATH ?? '', ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  })
  let output = ''
  const waiters = new Set<() => void>()
  const onData = (chunk: Buffer) => {
    output += chunk.toString('utf8')
    for (const wake of waiters) wake()
  }
  child.stdout.on('data', onData)
  child.stderr.on('data', onData)
  const exited = new Promise<number | null>((resolve) => child.on('close', (code) => resolve(code)))
  const service: Service = {
    output: () => output,
    waitFor: (pattern) =>
      new Promise((resolve, reject) => {
        const check = () => {
          const match = pattern.exec(output)
          if (match) {
            waiters.delete(check)
            resolve(match[1] ?? match[0])
          }
        }
        waiters.add(check)
        check()
        void exited.then(() => {
          waiters.delete(check)
          reject(new Error(`${script} ended before printing ${pattern}:\n${output}`))
        })
      }),
    exited,
    stop: async () => {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGTERM')
      return exited
    },
  }
  started.push(service)
  return service
}

describe('OUTBOX_SECRET in the orders example', () => {
  it('signs and verifies the deliveries of the services run alone, set once as the README exports it', async () => {
    const sub = startScript('subscriber', { DATABASE_URL: subscriber.url, PORT: '0', OUTBOX_SECRET: secret })
    const shop = startScript('orders-service', { DATABASE_URL: orders.url, PORT: '0' })
    const subscriberUrl = await sub.waitFor(/subscriber: listening on (\S+),/)
    const ordersUrl = await shop.waitFor(/orders service: listening on (\S+)/)
    const relay = startScript('relay', {
      DATABASE_URL: orders.url,
      SUBSCRIBER_URL: `${subscriberUrl}/hooks`,
      OUTBOX_SECRET: secret,
    })
    await relay.waitFor(/relay: delivering to/)

    const placed = await fetch(`${ordersUrl}/orders`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ customer: 'ada', totalCents: 4200 }),
    })
    expect(placed.status).toBe(201)
    const { order } = (await placed.json()) as { order: { id: string } }
    // A relay signing with another variable's secret (or none) would be answered 401 here, and never get through.
    await expect
      .poll(async () => (await fetch(`${subscriberUrl}/orders/${order.id}`)).status, { timeout: 30_000 })
      .toBe(200)
    const copy = (await (await fetch(`${subscriberUrl}/orders/${order.id}`)).json()) as Record<
      string,
      unknown
    >
    expect(copy).toMatchObject({ customer: 'ada', total_cents: 4200, status: 'placed' })
    expect(relay.output()).not.toMatch(/unsigned/i)

    expect(await relay.stop()).toBe(0)
    expect(await shop.stop()).toBe(0)
    expect(await sub.stop()).toBe(0)
  })

  it('the subscriber refuses to start without it, and names it', async () => {
    const sub = startScript('subscriber', { DATABASE_URL: subscriber.url, PORT: '0' })
    expect(await sub.exited).toBe(1)
    expect(sub.output()).toContain('set OUTBOX_SECRET')
  })
})

describe('the signing secret’s name across the repository', () => {
  it('is OUTBOX_SECRET in every README, snippet, TSDoc example, example and deploy file', () => {
    // Assembled, so that this file does not name it itself. Other senders' secrets (SVIX_WEBHOOK_SECRET, …) are theirs.
    const otherName = new RegExp(`(?<![A-Z_])${['WEBHOOK', 'SECRET'].join('_')}`)
    const files = execFileSync('git', ['ls-files', '--cached', '--others', '--exclude-standard'], {
      cwd: ROOT,
      encoding: 'utf8',
    })
      .split('\n')
      .filter((path) => path !== '' && !/(^|\/)(node_modules|dist)\//.test(path))
      .filter((path) => path !== 'CHANGELOG.md') // the one place that names the old variable, on purpose
      .filter((path) => /\.(ts|mts|cts|js|mjs|md|json|ya?ml|service|sh)$|(^|\/)(Dockerfile|run)$/.test(path))
    expect(files.length).toBeGreaterThan(100)
    const offenders = files.filter((path) => {
      try {
        return otherName.test(readFileSync(join(ROOT, path), 'utf8'))
      } catch {
        return false // listed but deleted in the working tree
      }
    })
    expect(offenders).toEqual([])
  })
})
