/**
 * What the relay image runs, without building the image (no container engine or base image here): the deploy
 * folder made by the Dockerfile's own `pnpm … deploy` command, run from its ENTRYPOINT path with nothing on PATH but
 * `node` — no pnpm, no npm, no workspace `node_modules` above it to borrow a package from. It migrates, relays with
 * the Dockerfile's flags, answers both probes and delivers an event to a loopback sink.
 *
 * Budget: ≈ 5 s on a 2-core machine (the deploy reuses pnpm's store: the command runs offline after
 * `pnpm install`).
 */
import { type ChildProcess, execFileSync, spawn } from 'node:child_process'
import { mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { enqueue } from '@outbox/producer'
import { freePort, startSink, useTestDatabase } from '@outbox/test-harness'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'

const t = useTestDatabase()
const REPO_ROOT = fileURLToPath(new URL('../../', import.meta.url))
const dockerfile = readFileSync(join(REPO_ROOT, 'deploy/Dockerfile'), 'utf8')

/** The build stage's commands, one per `&&` of its RUN after `COPY . .`, continuation lines joined. */
const buildCommands = /^COPY \. \.\n(?:#.*\n)*RUN ((?:.*\\\n)*.*)$/m
  .exec(dockerfile)![1]!
  .replace(/\\\n/g, ' ')
  .split('&&')
  .map((command) => command.trim().replace(/\s+/g, ' '))
/** Where the final stage puts the deploy folder (`COPY --from=build /out /app`). */
const [, OUT, APP] = /^COPY --from=build (\S+) (\S+)$/m.exec(dockerfile)!
const entrypoint: string[] = JSON.parse(/^ENTRYPOINT (\[.*\])$/m.exec(dockerfile)![1]!)
const cmd: string[] = JSON.parse(/^CMD (\[.*\])$/m.exec(dockerfile)![1]!)

const work = mkdtempSync(join(tmpdir(), 'outbox-relay-image-'))
const app = join(work, 'app')
/** A PATH holding `node` and nothing else, as in the image. */
const bin = join(work, 'bin')
const running = new Set<ChildProcess>()

afterAll(() => {
  for (const child of running) child.kill('SIGKILL')
  rmSync(work, { recursive: true, force: true })
})

beforeAll(() => {
  // `pnpm install --frozen-lockfile` and `pnpm build` have run before any test; the deploy is the step that chooses
  // what the image holds, and it runs here as written, into a temporary folder instead of the build stage's.
  expect(buildCommands).toEqual([
    'pnpm install --frozen-lockfile',
    'pnpm build',
    expect.stringMatching(/^pnpm --filter \S+ deploy --prod \S+$/),
  ])
  const deploy = buildCommands[2]!.split(' ')
  expect(deploy.at(-1)).toBe(OUT)
  execFileSync('pnpm', [...deploy.slice(1, -1), app], { cwd: REPO_ROOT, stdio: 'pipe' })
  execFileSync('mkdir', ['-p', bin])
  symlinkSync(process.execPath, join(bin, 'node'))
}, 120_000)

/** Runs the image's `node <cli>` with `args`, its PATH holding only `node`, the working directory the image's. */
function startImage(args: readonly string[], env: Record<string, string>) {
  expect(entrypoint[0]).toBe('node')
  const cli = entrypoint[1]!.replace(APP!, app)
  // Spawned by name: `node` is looked up in the child's PATH, as the image's ENTRYPOINT is.
  const child = spawn('node', [cli, ...args], {
    cwd: app,
    env: { PATH: bin, NODE_ENV: 'production', ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  })
  running.add(child)
  let output = ''
  child.stdout.setEncoding('utf8').on('data', (chunk: string) => {
    output += chunk
  })
  child.stderr.setEncoding('utf8').on('data', (chunk: string) => {
    output += chunk
  })
  const exited = new Promise<number | null>((resolve) => {
    child.once('close', (code) => {
      running.delete(child)
      resolve(code)
    })
  })
  return { child, exited, output: () => output }
}

describe('the relay image (its deploy folder, with only node on PATH)', () => {
  it('migrates, relays with the Dockerfile flags, answers /healthz and /readyz, and delivers an event', async ({
    onTestFinished,
  }) => {
    const schema = 'relay_image'
    const sink = await startSink()
    onTestFinished(() => sink.close())
    const secretFile = join(work, 'signing-secrets')
    writeFileSync(secretFile, 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\n')
    const env = { DATABASE_URL: t.url, OUTBOX_SCHEMA: schema }

    const migrate = startImage(['migrate'], env)
    expect(await migrate.exited, migrate.output()).toBe(0)

    // ENTRYPOINT's own subcommand, then CMD with a free port (files run side by side).
    const port = await freePort()
    const args = [...entrypoint.slice(2), ...cmd]
    args[args.indexOf('--metrics-port') + 1] = String(port)
    const relay = startImage(args, { ...env, OUTBOX_ENDPOINT: sink.url, OUTBOX_SECRET_FILE: secretFile })
    onTestFinished(() => {
      relay.child.kill('SIGKILL')
    })
    const status = async (path: string) => {
      try {
        return (await fetch(`http://127.0.0.1:${port}${path}`)).status
      } catch {
        return 0
      }
    }
    for (const path of ['/healthz', '/readyz'])
      await expect.poll(() => status(path), { timeout: 15_000, message: relay.output() }).toBe(200)

    const { eventId } = await t.db
      .transaction()
      .execute((trx) =>
        enqueue(
          trx,
          { aggregateType: 'order', aggregateId: 'o-1', eventType: 'order.created', payload: { n: 1 } },
          { schema },
        ),
      )
    await expect
      .poll(() => sink.requests.map((request) => request.headers['webhook-id']), {
        timeout: 15_000,
        message: relay.output(),
      })
      .toEqual([eventId])
    expect(sink.requests[0]!.headers['webhook-signature']).toMatch(/^v1,/)

    relay.child.kill('SIGTERM')
    expect(await relay.exited, relay.output()).toBe(0)
  })
})
