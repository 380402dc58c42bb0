import { request as httpRequest } from 'node:http'
import { useTestDatabase } from '@outbox/test-harness'
import express from 'express'
import request from 'supertest'
import { beforeAll, describe, expect, it } from 'vitest'
import { createConsumer, OutboxError } from '../src/index.js'
import {
  appWith,
  countRows,
  createEffects,
  delivery,
  listen,
  makeEvent,
  post,
  quiet,
  recordingLogger,
  refusalRecorder,
  writeEffect,
} from './support.js'

const t = useTestDatabase()

beforeAll(async () => {
  await createEffects(t.db)
})

/** Asserts the refusal is a problem document and that not a single row was written anywhere. */
async function expectProblemAndNothingRecorded(
  answer: request.Response,
  status: number,
  code: string,
): Promise<void> {
  expect(answer.status).toBe(status)
  expect(answer.headers['content-type']).toMatch(/^application\/problem\+json/)
  expect(answer.body).toMatchObject({ status, code, type: expect.stringContaining(code) })
  expect(typeof answer.body.detail).toBe('string')
  expect(answer.text).not.toMatch(/\bat .+:\d+:\d+/)
  expect(await countRows(t.db, 'processed_events')).toBe(0)
  expect(await countRows(t.db, 'consumer_cursors')).toBe(0)
  expect(await countRows(t.db, 'effects')).toBe(0)
}

function consumerApp(options: { maxBodyBytes?: number } = {}) {
  let calls = 0
  const logger = recordingLogger()
  const { refusals, onError } = refusalRecorder()
  const { dedupe } = createConsumer({ db: t.db, allowUnsigned: true, logger, onError, ...options })
  const app = appWith(
    dedupe(async (event, trx) => {
      calls++
      await writeEffect(trx, event)
    }),
  )
  return { app, logger, refusals, calls: () => calls }
}

describe('dedupe refuses what is not a well-formed webhook, and records nothing', () => {
  describe('415 unsupported media type', () => {
    const event = makeEvent()
    const { body, headers } = delivery(event)
    const cases: [string, Record<string, string>][] = [
      ['no content-type', { 'content-type': '' }],
      ['text/plain', { 'content-type': 'text/plain' }],
      ['a form', { 'content-type': 'application/x-www-form-urlencoded' }],
      ['a charset other than UTF-8', { 'content-type': 'application/json; charset=latin1' }],
      ['a compressed body', { 'content-encoding': 'gzip' }],
    ]
    for (const [name, override] of cases) {
      it(`refuses ${name}`, async () => {
        const { app, calls } = consumerApp()
        const answer = await request(app)
          .post('/hooks')
          .set({ ...headers, ...override })
          .send(body)
        await expectProblemAndNothingRecorded(answer, 415, 'unsupported_media_type')
        expect(calls()).toBe(0)
      })
    }

    it('accepts application/json with a utf-8 charset, in any case', async () => {
      const { app } = consumerApp()
      const fine = makeEvent({ aggregateId: 'charset' })
      const ok = delivery(fine)
      const answer = await request(app)
        .post('/hooks')
        .set({ ...ok.headers, 'content-type': 'Application/JSON; Charset="UTF-8"' })
        .send(ok.body)
      expect(answer.status).toBe(200)
      await t.db.deleteFrom('processed_events').execute()
      await t.db.deleteFrom('consumer_cursors').execute()
      await t.db.deleteFrom('effects').execute()
    })
  })

  describe('413 payload too large', () => {
    it('refuses a body over the default 1 MiB limit and accepts one just under it', async () => {
      const { app } = consumerApp()
      const big = makeEvent({ aggregateId: 'big', data: { blob: 'x'.repeat(1_048_576) } })
      const tooLarge = delivery(big)
      await expectProblemAndNothingRecorded(
        await request(app).post('/hooks').set(tooLarge.headers).send(tooLarge.body),
        413,
        'payload_too_large',
      )

      const fits = makeEvent({ aggregateId: 'fits', data: { blob: 'x'.repeat(1_000_000) } })
      const ok = delivery(fits)
      expect((await request(app).post('/hooks').set(ok.headers).send(ok.body)).status).toBe(200)
      await t.db.deleteFrom('processed_events').execute()
      await t.db.deleteFrom('consumer_cursors').execute()
      await t.db.deleteFrom('effects').execute()
    })

    it('refuses from content-length alone with a configured limit', async () => {
      const { app } = consumerApp({ maxBodyBytes: 1024 })
      const event = makeEvent({ data: { blob: 'y'.repeat(2000) } })
      const { body, headers } = delivery(event)
      const answer = await request(app).post('/hooks').set(headers).send(body)
      await expectProblemAndNothingRecorded(answer, 413, 'payload_too_large')
      expect(answer.body.limitBytes).toBe(1024)
    })

    it('enforces the limit while streaming a chunked body: the answer comes before the client finishes', async () => {
      const { app } = consumerApp({ maxBodyBytes: 64 * 1024 })
      const server = await listen(app)
      try {
        const answer = await new Promise<{ status: number; text: string; sentBytes: number }>(
          (resolve, reject) => {
            let sentBytes = 0
            let stop = false
            const req = httpRequest(
              `${server.url}/hooks`,
              { method: 'POST', agent: false, headers: { 'content-type': 'application/json' } },
              (res) => {
                stop = true
                let text = ''
                res.on('data', (chunk) => {
                  text += chunk
                })
                res.on('end', () => {
                  req.destroy()
                  resolve({ status: res.statusCode ?? 0, text, sentBytes })
                })
              },
            )
            req.on('error', (error) => (stop ? undefined : reject(error)))
            // an "endless" body: 16 KiB chunks until the server answers (capped at 64 MiB to fail, not hang)
            const chunk = Buffer.alloc(16 * 1024, 0x20)
            const pump = () => {
              if (stop) return
              if (sentBytes > 64 * 1024 * 1024) return reject(new Error('no answer before 64 MiB were sent'))
              sentBytes += chunk.length
              if (req.write(chunk)) setImmediate(pump)
              else req.once('drain', pump)
            }
            pump()
          },
        )
        expect(answer.status).toBe(413)
        expect(JSON.parse(answer.text)).toMatchObject({ code: 'payload_too_large' })
        expect(answer.sentBytes).toBeLessThan(64 * 1024 * 1024)
        expect(await countRows(t.db, 'processed_events')).toBe(0)
      } finally {
        await server.close()
      }
    })
  })

  describe('400 bad request', () => {
    const cases: [string, string, () => { body: string; headers: Record<string, string> }][] = [
      ['malformed JSON', 'malformed_json', () => ({ ...delivery(makeEvent()), body: '{"event_id": ' })],
      ['an empty body', 'malformed_json', () => ({ ...delivery(makeEvent()), body: '' })],
      ['a JSON array', 'invalid_envelope', () => ({ ...delivery(makeEvent()), body: '[]' })],
      [
        'a missing field',
        'invalid_envelope',
        () => {
          const event = makeEvent()
          const { headers, body } = delivery(event)
          const { aggregate_id: _dropped, ...rest } = JSON.parse(body)
          return { headers, body: JSON.stringify(rest) }
        },
      ],
      [
        'sequence 0',
        'invalid_envelope',
        () => {
          const { headers, body } = delivery(makeEvent())
          return { headers, body: body.replace('"sequence":1', '"sequence":0') }
        },
      ],
      [
        'no x-idempotency-key',
        'idempotency_key_mismatch',
        () => {
          const { headers, body } = delivery(makeEvent())
          const { 'x-idempotency-key': _key, ...rest } = headers
          return { headers: rest, body }
        },
      ],
      [
        'an x-idempotency-key of another event',
        'idempotency_key_mismatch',
        () => {
          const { headers, body } = delivery(makeEvent())
          return { headers: { ...headers, 'x-idempotency-key': makeEvent().eventId }, body }
        },
      ],
      [
        'no x-event-sequence',
        'sequence_header_mismatch',
        () => {
          const { headers, body } = delivery(makeEvent())
          const { 'x-event-sequence': _sequence, ...rest } = headers
          return { headers: rest, body }
        },
      ],
      [
        'an x-event-sequence that differs from the body',
        'sequence_header_mismatch',
        () => {
          const { headers, body } = delivery(makeEvent({ sequence: 3 }))
          return { headers: { ...headers, 'x-event-sequence': '4' }, body }
        },
      ],
      [
        'a non-decimal x-event-sequence',
        'sequence_header_mismatch',
        () => {
          const { headers, body } = delivery(makeEvent({ sequence: 3 }))
          return { headers: { ...headers, 'x-event-sequence': '0x3' }, body }
        },
      ],
    ]
    for (const [name, code, build] of cases) {
      it(`refuses ${name} (${code})`, async () => {
        const { app, calls, refusals, logger } = consumerApp()
        const { body, headers } = build()
        const answer = await request(app).post('/hooks').set(headers).send(body)
        await expectProblemAndNothingRecorded(answer, 400, code)
        expect(calls()).toBe(0)
        expect(refusals.map((refused) => refused.code)).toEqual([code])
        const refusalLines = logger.lines.filter((line) => line.msg.startsWith('webhook refused'))
        expect(refusalLines.map((line) => [line.level, line.meta?.code])).toEqual([['warn', code]])
      })
    }

    it('refuses a body that is not UTF-8 (malformed_json)', async () => {
      const { app, calls } = consumerApp()
      const server = await listen(app)
      try {
        const event = makeEvent()
        const { body, headers } = delivery(event)
        const bytes = Buffer.from(body.replace('paid', 'p\u00e9id'), 'latin1') // é as one Latin-1 byte
        const answer = await post(server.url, bytes, headers)
        expect(answer.status).toBe(400)
        expect(answer.json.code).toBe('malformed_json')
        expect(calls()).toBe(0)
        expect(await countRows(t.db, 'processed_events')).toBe(0)
      } finally {
        await server.close()
      }
    })

    it('lists every envelope problem at once', async () => {
      const { app } = consumerApp()
      const { headers } = delivery(makeEvent())
      const answer = await request(app).post('/hooks').set(headers).send('{"event_id":"nope","sequence":-1}')
      await expectProblemAndNothingRecorded(answer, 400, 'invalid_envelope')
      expect(answer.body.errors.length).toBeGreaterThanOrEqual(5)
    })
  })

  describe('a body already consumed by a parser', () => {
    it('answers the clear mounting error when express.json() ran first, and records nothing', async () => {
      const logger = recordingLogger()
      const { refusals, onError } = refusalRecorder()
      const { dedupe } = createConsumer({ db: t.db, allowUnsigned: true, logger, onError })
      const app = express()
      app.use(express.json())
      app.post(
        '/hooks',
        dedupe(async (event, trx) => writeEffect(trx, event)),
      )
      const { body, headers } = delivery(makeEvent())

      const answer = await request(app).post('/hooks').set(headers).send(body)

      await expectProblemAndNothingRecorded(answer, 500, 'body_already_parsed')
      expect(answer.body.detail).toContain('express.json()')
      expect(answer.body.detail).toMatch(/mount dedupe without a JSON parser in front of it.*express\.raw/)
      expect(refusals[0]?.cause).toBeInstanceOf(OutboxError)
      expect((refusals[0]!.cause as OutboxError).code).toBe('ERR_OUTBOX_BODY_ALREADY_PARSED')
      expect(
        logger.lines.some((line) => line.level === 'error' && line.meta?.code === 'body_already_parsed'),
      ).toBe(true)
    })

    it('works when the parser is mounted after the webhook route', async () => {
      const { dedupe } = createConsumer({ db: t.db, allowUnsigned: true, logger: quiet })
      const app = express()
      app.post(
        '/hooks',
        dedupe(async (event, trx) => writeEffect(trx, event)),
      )
      app.use(express.json())
      const event = makeEvent({ aggregateId: 'mounted-right' })
      const { body, headers } = delivery(event)
      const answer = await request(app).post('/hooks').set(headers).send(body)
      expect(answer.body.status).toBe('applied')
      await t.db.deleteFrom('processed_events').execute()
      await t.db.deleteFrom('consumer_cursors').execute()
      await t.db.deleteFrom('effects').execute()
    })
  })

  describe('onError and the logger', () => {
    it('see a 500 with its cause, while the client gets none of it; a throwing onError changes nothing', async () => {
      const logger = recordingLogger()
      const { dedupe } = createConsumer({
        db: t.db,
        allowUnsigned: true,
        logger,
        onError: () => {
          throw new Error('broken hook')
        },
      })
      const app = appWith(
        dedupe(async () => {
          throw new Error('connection string postgres://admin:hunter2@db')
        }),
      )
      const { body, headers } = delivery(makeEvent())
      const answer = await request(app).post('/hooks').set(headers).send(body)
      await expectProblemAndNothingRecorded(answer, 500, 'handler_failed')
      expect(answer.text).not.toContain('hunter2')
      const failure = logger.lines.find(
        (line) => line.level === 'error' && line.meta?.code === 'handler_failed',
      )
      expect(JSON.stringify(failure?.meta)).toContain('hunter2')
      expect(logger.lines.some((line) => line.msg.includes('onError threw'))).toBe(true)
    })
  })
})
