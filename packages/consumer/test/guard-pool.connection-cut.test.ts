import { type ChildProcess, spawn } from 'node:child_process'
import { once } from 'node:events'
import { existsSync } from 'node:fs'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { useTestDatabase } from '@outbox/test-harness'
import { sql } from 'kysely'
import pg from 'pg'
import { afterEach, beforeAll, describe, expect, it } from 'vitest'
import { createPool, guardPool, isGuardedPool, silentLogger } from '../src/index.js'
import {
  createEffects,
  delivery,
  type HttpAnswer,
  makeEvent,
  post,
  recorded,
  recordingLogger,
} from './support.js'

const t = useTestDatabase()

const FIXTURE = fileURLToPath(new URL('./fixtures/connection-cut-consumer.mjs', import.meta.url))
const PACKAGE = fileURLToPath(new URL('../', import.meta.url))

interface ConsumerProcess {
  readonly child: ChildProcess
  readonly url: string
  readonly exited: Promise<{ code: number | null; stderr: string }>
}

const started: ChildProcess[] = []

/** Starts the fixture on the built package and waits for its port. */
async function startConsumer(mode: 'guarded' | 'plain'): Promise<ConsumerProcess> {
  const child = spawn(process.execPath, [FIXTURE, mode], {
    env: { PATH: process.env.PATH, DATABASE_URL: t.url },
    stdio: ['ignore', 'pipe', 'pipe'],
  })
  started.push(child)
  let stderr = ''
  child.stderr!.on('data', (chunk: Buffer) => {
    stderr += chunk.toString()
  })
  const exited = once(child, 'exit').then(([code]) => ({ code: code as number | null, stderr }))
  const port = await new Promise<number>((resolve, reject) => {
    let out = ''
    child.stdout!.on('data', (chunk: Buffer) => {
      out += chunk.toString()
      const line = out.split('\n')[0]
      if (out.includes('\n') && line !== undefined) resolve((JSON.parse(line) as { port: number }).port)
    })
    void exited.then(({ code }) => reject(new Error(`the consumer process exited with ${code}:\n${stderr}`)))
  })
  return { child, url: `http://127.0.0.1:${port}`, exited }
}

/** Waits until the handler's `pg_sleep` runs, then ends that backend from another connection. */
async function cutTheHandlersConnection(): Promise<void> {
  for (;;) {
    const { rows } = await sql<{ pid: number }>`
      SELECT pid FROM pg_stat_activity
      WHERE datname = current_database() AND state = 'active' AND query LIKE 'select pg_sleep(%'`.execute(
      t.db,
    )
    const pid = rows[0]?.pid
    if (pid !== undefined) {
      await sql`SELECT pg_terminate_backend(${pid})`.execute(t.db)
      return
    }
    await new Promise((resolve) => setTimeout(resolve, 20))
  }
}

beforeAll(async () => {
  await createEffects(t.db)
  // The child runs dist/ — as an application does — which `pnpm test` builds first; after editing src/ by hand,
  // run `pnpm build` before this file.
  if (!existsSync(join(PACKAGE, 'dist', 'guard-pool.js'))) {
    throw new Error('packages/consumer/dist has no guard-pool.js: run `pnpm build` first')
  }
})

afterEach(async () => {
  for (const child of started.splice(0)) {
    if (child.exitCode === null && child.signalCode === null) {
      const exited = once(child, 'exit')
      child.kill('SIGTERM')
      await exited
    }
  }
})

describe('a PostgreSQL connection cut while a handler runs', () => {
  it('with createPool: answers 500, records nothing, the process lives, and the next delivery applies', async () => {
    const consumer = await startConsumer('guarded')
    const event = makeEvent({ aggregateId: 'cut-guarded', data: { block: true } })
    const { body, headers } = delivery(event)

    const answering = post(consumer.url, body, headers)
    await cutTheHandlersConnection()
    const answer = await answering
    expect(answer.status).toBe(500)
    expect(answer.json).toMatchObject({ code: 'handler_failed' })
    expect(await recorded(t.db, event)).toEqual({ processed: 0, effects: 0, cursor: undefined })

    // Still alive: the same event delivered again is applied, on a fresh connection.
    const again: HttpAnswer = await post(consumer.url, body, headers)
    expect(again.status).toBe(200)
    expect(again.json).toEqual({ status: 'applied', eventId: event.eventId })
    expect(await recorded(t.db, event)).toEqual({ processed: 1, effects: 1, cursor: 1 })
    expect(consumer.child.exitCode).toBeNull()

    // The guard said what happened, once.
    const logged = await fetch(`${consumer.url}/logged`).then((response) => response.json())
    expect(logged).toEqual([
      expect.objectContaining({
        level: 'warn',
        fields: expect.objectContaining({ connection: 'checked out', error: expect.objectContaining({}) }),
      }),
    ])
  })

  it('with a bare pg.Pool the same cut kills the process (what the guard prevents)', async () => {
    const consumer = await startConsumer('plain')
    const event = makeEvent({ aggregateId: 'cut-plain', data: { block: true } })
    const { body, headers } = delivery(event)

    const answering = post(consumer.url, body, headers).catch((error: Error) => error)
    await cutTheHandlersConnection()
    const { code, stderr } = await consumer.exited
    expect(code).not.toBe(0)
    expect(stderr).toMatch(/Unhandled 'error' event|terminat/)
    expect(await answering).toBeInstanceOf(Error) // the request died with the process: no answer at all
    expect(await recorded(t.db, event)).toEqual({ processed: 0, effects: 0, cursor: undefined })
  })
})

describe('guardPool', () => {
  it('adds one listener of each kind, once, marks the pool, and guards clients opened before it', async () => {
    const pool = new pg.Pool({ connectionString: t.url, max: 2 })
    try {
      const early = await pool.connect() // checked out before the guard: the 'connect' listener never sees it
      expect(isGuardedPool(pool)).toBe(false)
      const lines = recordingLogger()
      let warnedOnce: () => void = () => {}
      const warned = new Promise<void>((resolve) => {
        warnedOnce = resolve
      })
      const logger = {
        ...lines,
        warn: (fields: Record<string, unknown>, message: string) => {
          lines.warn(fields, message)
          warnedOnce()
        },
      }
      expect(guardPool(pool, logger)).toBe(pool)
      expect(guardPool(pool, logger)).toBe(pool)
      expect(isGuardedPool(pool)).toBe(true)
      expect(pool.listenerCount('error')).toBe(1)
      expect(pool.listenerCount('connect')).toBe(1)

      const { rows } = await early.query<{ pid: number }>('SELECT pg_backend_pid() AS pid')
      await sql`SELECT pg_terminate_backend(${rows[0]!.pid})`.execute(t.db)
      await warned // only the guard listens to this client: without it the process would have died here
      // pg may report the same cut twice on a checked-out client (the server's FATAL message, then "Connection
      // terminated unexpectedly" as the socket closes): whether the second comes is a race, so it is sent here.
      early.emit('error', new Error('Connection terminated unexpectedly'))
      early.release(true)
      expect(lines.lines.filter((line) => line.level === 'warn')).toEqual([
        expect.objectContaining({ meta: expect.objectContaining({ connection: 'checked out' }) }),
      ])

      // The pool opens a fresh connection for the next query.
      expect((await pool.query<{ one: number }>('SELECT 1 AS one')).rows).toEqual([{ one: 1 }])
    } finally {
      await pool.end()
    }
  })

  it('createPool returns a guarded pg.Pool; a non-pool or a bad logger is refused clearly', async () => {
    const pool = createPool({ connectionString: t.url, max: 1 }, silentLogger)
    try {
      expect(pool).toBeInstanceOf(pg.Pool)
      expect(isGuardedPool(pool)).toBe(true)
    } finally {
      await pool.end()
    }
    expect(() => guardPool({} as never)).toThrow(/pass a pg\.Pool/)
    expect(() => guardPool(new pg.Pool(), { warn: () => {} } as never)).toThrow(/logger/)
  })
})
