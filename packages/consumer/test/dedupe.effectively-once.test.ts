import { useTestDatabase } from '@outbox/test-harness'
import request from 'supertest'
import { beforeAll, describe, expect, it } from 'vitest'
import { createConsumer } from '../src/index.js'
import {
  appWith,
  countRows,
  createEffects,
  delivery,
  listen,
  makeEvent,
  post,
  quiet,
  recorded,
  refusalRecorder,
  sleep,
  writeEffect,
} from './support.js'

const t = useTestDatabase()

beforeAll(async () => {
  await createEffects(t.db)
})

describe('dedupe: one effect per event id', () => {
  it('runs the handler once for a duplicate and answers duplicate_ignored', async () => {
    let calls = 0
    const { dedupe } = createConsumer({ db: t.db, allowUnsigned: true, logger: quiet })
    const app = appWith(
      dedupe(async (event, trx) => {
        calls++
        await writeEffect(trx, event)
      }),
    )
    const event = makeEvent({ aggregateId: 'dup-1' })
    const { body, headers } = delivery(event)

    const first = await request(app).post('/hooks').set(headers).send(body)
    const second = await request(app).post('/hooks').set(headers).send(body)
    const third = await request(app).post('/hooks').set(headers).send(body)

    expect(first.status).toBe(200)
    expect(first.body).toEqual({ status: 'applied', eventId: event.eventId })
    expect(second.status).toBe(200)
    expect(second.body).toEqual({ status: 'duplicate_ignored', eventId: event.eventId })
    expect(third.body.status).toBe('duplicate_ignored')
    expect(calls).toBe(1)
    expect(await recorded(t.db, event)).toEqual({ processed: 1, effects: 1, cursor: 1 })
  })

  it('applies 20 concurrent deliveries of one event exactly once, all answered 200', async () => {
    // A pool as wide as the burst, so all 20 transactions really meet at the unique index at once.
    const db = t.connect({ max: 25 })
    let calls = 0
    let active = 0
    let maxActive = 0
    const { dedupe } = createConsumer({ db, allowUnsigned: true, logger: quiet })
    const server = await listen(
      appWith(
        dedupe(async (event, trx) => {
          calls++
          active++
          maxActive = Math.max(maxActive, active)
          await sleep(150) // keep the first transaction open while the other 19 arrive
          await writeEffect(trx, event)
          active--
        }),
      ),
    )
    try {
      const event = makeEvent({ aggregateId: 'burst-1' })
      const { body, headers } = delivery(event)
      const answers = await Promise.all(Array.from({ length: 20 }, () => post(server.url, body, headers)))

      expect(answers.map((answer) => answer.status)).toEqual(Array(20).fill(200))
      const statuses = answers.map((answer) => answer.json.status)
      expect(statuses.filter((status) => status === 'applied')).toHaveLength(1)
      expect(statuses.filter((status) => status === 'duplicate_ignored')).toHaveLength(19)
      expect(calls).toBe(1)
      expect(maxActive).toBe(1)
      expect(await recorded(db, event)).toEqual({ processed: 1, effects: 1, cursor: 1 })
    } finally {
      await server.close()
    }
  })

  it('rolls back a handler that writes then throws (no effect, no dedupe row), and the retry applies', async () => {
    let fail = true
    const { refusals, onError } = refusalRecorder()
    const { dedupe } = createConsumer({ db: t.db, allowUnsigned: true, logger: quiet, onError })
    const app = appWith(
      dedupe(async (event, trx) => {
        await writeEffect(trx, event)
        if (fail) throw new Error('payment service said no: token sk_live_internal_detail')
      }),
    )
    const event = makeEvent({ aggregateId: 'throws-1' })
    const { body, headers } = delivery(event)

    const failed = await request(app).post('/hooks').set(headers).send(body)
    expect(failed.status).toBe(500)
    expect(failed.headers['content-type']).toMatch(/^application\/problem\+json/)
    expect(failed.body).toMatchObject({ code: 'handler_failed', status: 500 })
    expect(failed.text).not.toContain('sk_live_internal_detail')
    expect(failed.text).not.toMatch(/\bat .+:\d+:\d+/) // no stack frame
    expect(await recorded(t.db, event)).toEqual({ processed: 0, effects: 0, cursor: undefined })
    expect(refusals).toHaveLength(1)
    expect((refusals[0]!.cause as Error).message).toContain('payment service said no')

    fail = false
    const retried = await request(app).post('/hooks').set(headers).send(body)
    expect(retried.status).toBe(200)
    expect(retried.body.status).toBe('applied')
    expect(await recorded(t.db, event)).toEqual({ processed: 1, effects: 1, cursor: 1 })
  })

  it('lets a concurrent duplicate apply when the first attempt fails and rolls back', async () => {
    let attempts = 0
    let firstInHandler!: () => void
    const firstStarted = new Promise<void>((resolve) => {
      firstInHandler = resolve
    })
    const { dedupe } = createConsumer({ db: t.db, allowUnsigned: true, logger: quiet })
    const server = await listen(
      appWith(
        dedupe(async (event, trx) => {
          attempts++
          if (attempts === 1) {
            firstInHandler()
            await sleep(300) // the duplicate is now blocked on our uncommitted processed_events row
            throw new Error('first attempt fails')
          }
          await writeEffect(trx, event)
        }),
      ),
    )
    try {
      const event = makeEvent({ aggregateId: 'race-rollback' })
      const { body, headers } = delivery(event)
      const first = post(server.url, body, headers)
      await firstStarted
      const second = post(server.url, body, headers)
      const [a, b] = await Promise.all([first, second])
      expect(a.status).toBe(500)
      expect(b.status).toBe(200)
      expect(b.json.status).toBe('applied')
      expect(attempts).toBe(2)
      expect(await recorded(t.db, event)).toEqual({ processed: 1, effects: 1, cursor: 1 })
    } finally {
      await server.close()
    }
  })

  for (const sequence of ['monotonic', 'off'] as const) {
    it(`answers 500 when the handler swallows a database error (sequence '${sequence}'): COMMIT would roll back silently`, async () => {
      const { dedupe } = createConsumer({ db: t.db, allowUnsigned: true, logger: quiet, sequence })
      const app = appWith(
        dedupe(async (event, trx) => {
          await writeEffect(trx, event)
          try {
            await trx.selectFrom('no_such_table').selectAll().execute()
          } catch {
            // a handler that "handles" the error; the transaction is aborted nonetheless
          }
        }),
      )
      const event = makeEvent({ aggregateId: `swallow-${sequence}` })
      const { body, headers } = delivery(event)
      const answer = await request(app).post('/hooks').set(headers).send(body)
      expect(answer.status).toBe(500)
      expect(answer.body.code).toBe('handler_failed')
      expect(await recorded(t.db, event)).toEqual({ processed: 0, effects: 0, cursor: undefined })
    })
  }

  it('records the handler and the dedupe row in one transaction: effects equal processed rows', async () => {
    const before = {
      processed: await countRows(t.db, 'processed_events'),
      effects: await countRows(t.db, 'effects'),
    }
    let n = 0
    const { dedupe } = createConsumer({ db: t.db, allowUnsigned: true, logger: quiet, sequence: 'off' })
    const app = appWith(
      dedupe(async (event, trx) => {
        await writeEffect(trx, event)
        if (++n % 3 === 0) throw new Error('every third fails')
      }),
    )
    for (let i = 0; i < 9; i++) {
      const { body, headers } = delivery(makeEvent({ aggregateId: `mix-${i}` }))
      await request(app).post('/hooks').set(headers).send(body)
    }
    const after = {
      processed: await countRows(t.db, 'processed_events'),
      effects: await countRows(t.db, 'effects'),
    }
    expect(after.processed - before.processed).toBe(6)
    expect(after.effects - before.effects).toBe(6)
  })
})
