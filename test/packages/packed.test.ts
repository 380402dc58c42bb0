/**
 * The packages as an application gets them: packed with `pnpm pack`, installed with npm into a fresh app outside
 * the workspace, then loaded with `require()` from CommonJS and `import` from ESM, the `outbox` bin run, and a
 * TypeScript file type-checked against the published declarations. What the workspace resolves through its
 * `@outbox/source` condition and pnpm's links is not used anywhere here.
 */
import { execFile } from 'node:child_process'
import { existsSync, mkdirSync, mkdtempSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { promisify } from 'node:util'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { lintTarball } from './lint-tarball.js'
import { type PackedPackage, packPackages, REPO_ROOT } from './pack.js'

const run = promisify(execFile)

/** Exports an application reaches for first, per package. */
const KEY_EXPORTS = {
  '@outbox/protocol': ['signWebhook', 'verifyWebhook', 'parseEnvelope', 'HEADERS'],
  '@outbox/producer': ['migrate', 'enqueue', 'enqueueMany', 'Relay', 'prune', 'stats', 'redrive'],
  '@outbox/consumer': ['migrate', 'createConsumer', 'pruneProcessed'],
  '@outbox/console': ['createConsole', 'escapeHtml'],
} as const

type PackageName = keyof typeof KEY_EXPORTS
const NAMES = Object.keys(KEY_EXPORTS) as PackageName[]

/** The versions the app installs beside the tarballs: the ones the workspace develops against. */
function workspaceRange(dependency: string): string {
  const root = JSON.parse(readFileSync(join(REPO_ROOT, 'package.json'), 'utf8')) as {
    devDependencies: Record<string, string>
  }
  const range = root.devDependencies[dependency]
  if (range === undefined) throw new Error(`${dependency} is not a root devDependency`)
  return `${dependency}@${range}`
}

/** Prints each package's export names, as JSON, from CommonJS (`require`) or ESM (`import`). */
const CJS_LOADER = `
const names = ${JSON.stringify(NAMES)}
const loaded = {}
for (const name of names) loaded[name] = Object.keys(require(name)).sort()
process.stdout.write(JSON.stringify(loaded))
`
const ESM_LOADER = `
const names = ${JSON.stringify(NAMES)}
const loaded = {}
for (const name of names) loaded[name] = Object.keys(await import(name)).sort()
process.stdout.write(JSON.stringify(loaded))
`

/**
 * Type-checked with `module: nodenext` and `skipLibCheck: false`, so a declaration that imports an undeclared
 * package (`pg` without `@types/pg`) fails, and `@ts-expect-error` fails if the types had collapsed to `any`.
 */
const TYPED_ESM = `
import { createConsole, type OutboxConsole } from '@outbox/console'
import { createConsumer, createPool } from '@outbox/consumer'
import { enqueue, Relay, type RelayOptions } from '@outbox/producer'
import { parseSigningSecrets, signWebhook } from '@outbox/protocol'
import express from 'express'
import { Kysely, PostgresDialect } from 'kysely'
import pg from 'pg'

const db = new Kysely<any>({ dialect: new PostgresDialect({ pool: new pg.Pool() }) })
const options: RelayOptions = { db, endpoint: 'http://127.0.0.1:3000/hooks' }
export const relay: Relay = new Relay(options)
export const app = express().post('/hooks', createConsumer({ db, allowUnsigned: true }).dedupe(async () => {}))
// The other adapters and the pool guard, typed from the tarball (web Request and Response from Node's types).
const guarded = new Kysely<any>({ dialect: new PostgresDialect({ pool: createPool() }) })
const consumer = createConsumer({ db: guarded, secret: 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw' })
export const onFetch: (request: Request) => Promise<Response> = consumer.fetch(async (event) => {
  event.eventId satisfies string
})
export const onNode = consumer.node(async () => {})
export const headers: Record<string, string> = signWebhook(
  parseSigningSecrets('whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw'),
  { eventId: 'e1', body: '{}' },
)
// The console mounts in an express app like any router, and keeps its close().
export const outboxConsole: OutboxConsole = createConsole({ db, token: 'packed-console-token-0123456789' })
export const admin = express().use('/outbox', outboxConsole)
// enqueue takes a transaction, never the database: this must stay a type error.
// @ts-expect-error
await enqueue(db, { aggregateType: 'order', aggregateId: '1', eventType: 'order.created', payload: {} })
`
/** The same from CommonJS TypeScript: TypeScript 5.8+ type-checks a require() of ESM under `nodenext`. */
const TYPED_CJS = `
import producer = require('@outbox/producer')
import consumer = require('@outbox/consumer')
import protocol = require('@outbox/protocol')

export const loaded: [typeof producer.Relay, typeof consumer.createConsumer, typeof protocol.verifyWebhook] = [
  producer.Relay,
  consumer.createConsumer,
  protocol.verifyWebhook,
]
`

describe('the packed packages in a fresh npm app', () => {
  let workspace: string
  let app: string
  let packed: PackedPackage[]

  beforeAll(async () => {
    workspace = mkdtempSync(join(tmpdir(), 'outbox-packed-'))
    app = join(workspace, 'app')
    mkdirSync(app)
    packed = await packPackages(workspace)
    writeFileSync(join(app, 'package.json'), JSON.stringify({ name: 'packed-app', private: true }, null, 2))
    writeFileSync(join(app, 'load.cjs'), CJS_LOADER)
    writeFileSync(join(app, 'load.mjs'), ESM_LOADER)
    // All the tarballs in one command, so the dependencies on @outbox/protocol and @outbox/producer are met by
    // the tarballs, never looked up on the registry.
    await run(
      'npm',
      [
        'install',
        '--no-audit',
        '--no-fund',
        '--prefer-offline',
        '--loglevel=error',
        ...packed.map((entry) => entry.tarball),
        workspaceRange('kysely'),
        workspaceRange('pg'),
        workspaceRange('express'),
        workspaceRange('@types/express'),
        workspaceRange('@types/node'),
      ],
      { cwd: app, maxBuffer: 16 * 1024 * 1024 },
    )
  }, 240_000)

  afterAll(() => {
    if (workspace) rmSync(workspace, { recursive: true, force: true })
  })

  it('ships each manifest without the workspace-only condition or ranges, and the LICENSE', () => {
    const license = readFileSync(join(REPO_ROOT, 'LICENSE'), 'utf8')
    for (const name of NAMES) {
      const installed = join(app, 'node_modules', name)
      const manifest = readFileSync(join(installed, 'package.json'), 'utf8')
      expect(manifest, name).not.toContain('@outbox/source')
      expect(manifest, name).not.toContain('workspace:')
      expect(JSON.parse(manifest).exports['.'], name).toEqual({
        types: './dist/index.d.ts',
        import: './dist/index.js',
        default: './dist/index.js',
      })
      expect(readFileSync(join(installed, 'LICENSE'), 'utf8'), name).toBe(license)
    }
  })

  it('loads every package with require() from a .cjs file', async () => {
    const { stdout } = await run(process.execPath, ['load.cjs'], { cwd: app })
    const loaded = JSON.parse(stdout) as Record<PackageName, string[]>
    for (const name of NAMES)
      expect(loaded[name], name).toEqual(expect.arrayContaining([...KEY_EXPORTS[name]]))
  })

  it('imports every package from a .mjs file, with the same exports as require()', async () => {
    const [required, imported] = await Promise.all([
      run(process.execPath, ['load.cjs'], { cwd: app }),
      run(process.execPath, ['load.mjs'], { cwd: app }),
    ])
    const loaded = JSON.parse(imported.stdout) as Record<PackageName, string[]>
    for (const name of NAMES)
      expect(loaded[name], name).toEqual(expect.arrayContaining([...KEY_EXPORTS[name]]))
    expect(loaded).toEqual(JSON.parse(required.stdout))
  })

  it('loads the Fastify plugin from its subpath, by import and require(), with no fastify installed', async () => {
    // The app installs express but not fastify: the plugin imports only fastify's types, never fastify itself.
    const load = (kind: 'import' | 'require') =>
      run(
        process.execPath,
        [
          kind === 'import' ? '--input-type=module' : '--input-type=commonjs',
          '-e',
          kind === 'import'
            ? "const m = await import('@outbox/consumer/fastify'); process.stdout.write(typeof m.outboxWebhooks)"
            : "process.stdout.write(typeof require('@outbox/consumer/fastify').outboxWebhooks)",
        ],
        { cwd: app },
      )
    expect(existsSync(join(app, 'node_modules', 'fastify'))).toBe(false)
    expect((await load('import')).stdout).toBe('function')
    expect((await load('require')).stdout).toBe('function')
  })

  it('works without @opentelemetry/api, its optional peer: the consumer answers and tracing stays off', async ({
    onTestFinished,
  }) => {
    // npm installs no optional peer, but the producer's prom-client depends on the API, so npm hoists it into the
    // app: it is moved aside here, as in an app with only the consumer, so the packages' lazy look-up finds none.
    const api = join(app, 'node_modules', '@opentelemetry', 'api')
    const aside = `${api}.aside`
    const present = existsSync(api)
    if (present) renameSync(api, aside)
    onTestFinished(() => {
      if (present) renameSync(aside, api)
    })
    expect(existsSync(api)).toBe(false)
    // A real Kysely that never connects: a 415 is answered before any query.
    const script = (kind: 'import' | 'require') => {
      const load = (name: string) => (kind === 'import' ? `(await import('${name}'))` : `require('${name}')`)
      return `
      const { createConsumer } = ${load('@outbox/consumer')}
      const { Kysely, PostgresDialect } = ${load('kysely')}
      const pg = ${load('pg')}
      const db = new Kysely({ dialect: new PostgresDialect({ pool: new (pg.Pool ?? pg.default.Pool)() }) })
      const answer = await createConsumer({ db, allowUnsigned: true }).handle(async () => {})({
        method: 'POST',
        headers: { 'content-type': 'text/plain', traceparent: '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01' },
        body: new Uint8Array(),
      })
      process.stdout.write(String(answer.status))`
    }
    for (const kind of ['import', 'require'] as const) {
      const { stdout } = await run(
        process.execPath,
        [
          kind === 'import' ? '--input-type=module' : '--input-type=commonjs',
          '-e',
          kind === 'import' ? script(kind) : `(async () => {${script(kind)}})()`,
        ],
        { cwd: app },
      )
      expect(stdout, kind).toBe('415')
    }
  }, 60_000)

  it('runs the outbox bin from the installed tarball', async () => {
    // npx finds the bin the producer's tarball installed in node_modules/.bin (it would refuse to download one).
    const { stdout } = await run('npx', ['outbox', '--help'], {
      cwd: app,
      env: { ...process.env, npm_config_yes: 'false' },
    })
    expect(stdout).toMatch(/migrate/)
    expect(stdout).toMatch(/relay/)
    expect(stdout).toMatch(/dead-letters/)
  }, 60_000)

  it('installs prom-client with the producer, so outbox relay --metrics-port serves /metrics from a packed install', async () => {
    // Resolved from the producer's own directory, as its CLI imports it: a dependency, not a peer the app must add.
    const { stdout } = await run(
      process.execPath,
      [
        '-e',
        "const { createRequire } = require('node:module'); const from = createRequire(require.resolve('@outbox/producer/package.json')); const { Registry } = require(from.resolve('prom-client')); process.stdout.write(typeof new Registry().metrics)",
      ],
      { cwd: app },
    )
    expect(stdout).toBe('function')
    const manifest = JSON.parse(readFileSync(join(app, 'node_modules/@outbox/producer/package.json'), 'utf8'))
    expect(manifest.dependencies['prom-client']).toBeDefined()
    const help = await run('npx', ['outbox', 'relay', '--help'], {
      cwd: app,
      env: { ...process.env, npm_config_yes: 'false' },
    })
    expect(help.stdout).toMatch(/--metrics-port <port>/)
  }, 60_000)

  it('runs the outbox-console bin from the installed tarball, and refuses to start without a token', async () => {
    const { stdout } = await run('npx', ['outbox-console', '--help'], {
      cwd: app,
      env: { ...process.env, npm_config_yes: 'false' },
    })
    expect(stdout).toMatch(/--token/)
    expect(stdout).toMatch(/--actions/)
    const refused = await run('npx', ['outbox-console'], {
      cwd: app,
      env: { ...process.env, npm_config_yes: 'false', OUTBOX_CONSOLE_TOKEN: '' },
    }).catch((error: { code: number; stderr: string }) => error)
    expect(refused).toMatchObject({ code: 2 })
    expect((refused as { stderr: string }).stderr).toMatch(/OUTBOX_CONSOLE_TOKEN/)
  }, 60_000)

  it('ships the console’s browser assets and serves uPlot from the installed package', async () => {
    const installed = join(app, 'node_modules', '@outbox/console')
    expect(existsSync(join(installed, 'assets', 'console.js'))).toBe(true)
    expect(existsSync(join(installed, 'assets', 'console.css'))).toBe(true)
    // createConsole reads its assets and uPlot's at creation: it must find them where npm put them.
    const { stdout } = await run(
      process.execPath,
      [
        '--input-type=module',
        '-e',
        "const { createConsole } = await import('@outbox/console'); const c = createConsole({ db: { transaction() { return { execute: () => new Promise(() => {}) } } }, token: 'packed-console-token-0123456789' }); process.stdout.write(typeof c.close); process.exit(0)",
      ],
      { cwd: app },
    )
    expect(stdout).toBe('function')
  }, 60_000)

  it('type-checks against the published declarations, from ESM and from CommonJS', async () => {
    writeFileSync(join(app, 'typed.mts'), TYPED_ESM)
    writeFileSync(join(app, 'typed.cts'), TYPED_CJS)
    writeFileSync(
      join(app, 'tsconfig.json'),
      JSON.stringify({
        compilerOptions: {
          target: 'ES2022',
          module: 'nodenext',
          moduleResolution: 'nodenext',
          strict: true,
          skipLibCheck: false,
          noEmit: true,
          types: ['node'],
        },
        files: ['typed.mts', 'typed.cts'],
      }),
    )
    const tsc = join(REPO_ROOT, 'node_modules', 'typescript', 'bin', 'tsc')
    const result = await run(process.execPath, [tsc, '-p', 'tsconfig.json'], { cwd: app }).then(
      () => '',
      (error: { stdout?: string; message: string }) => error.stdout || error.message,
    )
    expect(result).toBe('')
  }, 120_000)

  it('passes publint and attw (but for the one accepted attw rule)', async () => {
    const reports = await Promise.all(
      packed.map(async ({ name, tarball }) => ({ name, reports: await lintTarball(tarball) })),
    )
    for (const { name, reports: each } of reports) {
      for (const report of each) expect(report.ok, `${report.tool} ${name}:\n${report.output}`).toBe(true)
    }
  }, 120_000)
})
