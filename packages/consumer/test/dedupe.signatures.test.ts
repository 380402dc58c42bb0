import { request as httpRequest } from 'node:http'
import { useTestDatabase } from '@outbox/test-harness'
import { Webhook } from 'standardwebhooks'
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
  newSecret,
  quiet,
  recorded,
  writeEffect,
} from './support.js'

const t = useTestDatabase()
const secret = newSecret()

beforeAll(async () => {
  await createEffects(t.db)
})

function signedApp(secrets: string | string[], options: { toleranceSeconds?: number } = {}) {
  let calls = 0
  const { dedupe } = createConsumer({ db: t.db, secret: secrets, logger: quiet, ...options })
  const app = appWith(
    dedupe(async (event, trx) => {
      calls++
      await writeEffect(trx, event)
    }),
  )
  return { app, calls: () => calls }
}

/** Signs with the public `standardwebhooks` package, as any Standard Webhooks sender would. */
function signWithStandardWebhooks(key: string, id: string, body: string, at = new Date()) {
  return {
    'webhook-id': id,
    'webhook-timestamp': String(Math.floor(at.getTime() / 1000)),
    'webhook-signature': new Webhook(key).sign(id, at, body),
  }
}

async function expectRefused(answer: request.Response, status: number, code: string) {
  expect(answer.status).toBe(status)
  expect(answer.headers['content-type']).toMatch(/^application\/problem\+json/)
  expect(answer.body).toMatchObject({ status, code })
  expect(await countRows(t.db, 'processed_events')).toBe(0)
  expect(await countRows(t.db, 'effects')).toBe(0)
}

describe('dedupe with a signing secret', () => {
  it('accepts a request signed by the public standardwebhooks package', async () => {
    const { app, calls } = signedApp(secret)
    const event = makeEvent({ aggregateId: 'sw-accepted' })
    const { body, headers } = delivery(event)
    const answer = await request(app)
      .post('/hooks')
      .set({ ...headers, ...signWithStandardWebhooks(secret, event.eventId, body) })
      .send(body)
    expect(answer.status).toBe(200)
    expect(answer.body.status).toBe('applied')
    expect(calls()).toBe(1)
    expect(await recorded(t.db, event)).toEqual({ processed: 1, effects: 1, cursor: 1 })
    await t.db.deleteFrom('processed_events').execute()
    await t.db.deleteFrom('effects').execute()
  })

  it('refuses a tampered body (401 invalid_signature)', async () => {
    const { app, calls } = signedApp(secret)
    const event = makeEvent()
    const { body, headers } = delivery(event, { secrets: secret })
    const tampered = body.replace('"paid"', '"refunded"')
    expect(tampered).not.toBe(body)
    await expectRefused(
      await request(app).post('/hooks').set(headers).send(tampered),
      401,
      'invalid_signature',
    )
    expect(calls()).toBe(0)
  })

  it('refuses a request signed with another secret (401 invalid_signature)', async () => {
    const { app } = signedApp(secret)
    const { body, headers } = delivery(makeEvent(), { secrets: newSecret() })
    await expectRefused(await request(app).post('/hooks').set(headers).send(body), 401, 'invalid_signature')
  })

  it('refuses an expired timestamp and one from the future (401 timestamp_out_of_window)', async () => {
    const { app } = signedApp(secret)
    for (const offsetSeconds of [-301, 301, -3600, 3600]) {
      const event = makeEvent()
      const at = new Date(Date.now() + offsetSeconds * 1000)
      const { body, headers } = delivery(event)
      const answer = await request(app)
        .post('/hooks')
        .set({ ...headers, ...signWithStandardWebhooks(secret, event.eventId, body, at) })
        .send(body)
      await expectRefused(answer, 401, 'timestamp_out_of_window')
    }
  })

  it('accepts a timestamp inside the window either way, and honours toleranceSeconds', async () => {
    const wide = signedApp(secret)
    const narrow = signedApp(secret, { toleranceSeconds: 60 })
    const attempts = [-240, 240].map((offsetSeconds) =>
      delivery(makeEvent({ aggregateId: `window${offsetSeconds}` }), {
        secrets: secret,
        timestamp: new Date(Date.now() + offsetSeconds * 1000),
      }),
    )
    for (const { body, headers } of attempts) {
      await expectRefused(
        await request(narrow.app).post('/hooks').set(headers).send(body),
        401,
        'timestamp_out_of_window',
      )
    }
    for (const { body, headers } of attempts) {
      expect((await request(wide.app).post('/hooks').set(headers).send(body)).body.status).toBe('applied')
    }
    await t.db.deleteFrom('processed_events').execute()
    await t.db.deleteFrom('consumer_cursors').execute()
    await t.db.deleteFrom('effects').execute()
  })

  it('refuses a request without signature headers (401 missing_signature)', async () => {
    const { app } = signedApp(secret)
    const { body, headers } = delivery(makeEvent())
    await expectRefused(await request(app).post('/hooks').set(headers).send(body), 401, 'missing_signature')
  })

  it('answers 401, not 400, to an unsigned malformed request: the signature is checked before parsing', async () => {
    const { app } = signedApp(secret)
    for (const body of ['{not json', '[]', '']) {
      const answer = await request(app).post('/hooks').set({ 'content-type': 'application/json' }).send(body)
      await expectRefused(answer, 401, 'missing_signature')
      expect(answer.body.detail).not.toMatch(/json|envelope/i)
    }
  })

  it('answers 400 to a correctly signed but malformed body', async () => {
    const { app } = signedApp(secret)
    const id = makeEvent().eventId
    const body = '{not json'
    const answer = await request(app)
      .post('/hooks')
      .set({ 'content-type': 'application/json', ...signWithStandardWebhooks(secret, id, body) })
      .send(body)
    await expectRefused(answer, 400, 'malformed_json')
  })

  it('refuses a signed request whose webhook-id is not the event id (400)', async () => {
    const { app } = signedApp(secret)
    const event = makeEvent()
    const { body, headers } = delivery(event)
    const answer = await request(app)
      .post('/hooks')
      .set({ ...headers, ...signWithStandardWebhooks(secret, makeEvent().eventId, body) })
      .send(body)
    await expectRefused(answer, 400, 'idempotency_key_mismatch')
  })

  describe('rotation', () => {
    const oldSecret = newSecret()
    const newerSecret = newSecret()

    it('accepts a signature by either configured secret and refuses any other', async () => {
      const { app } = signedApp([newerSecret, oldSecret])
      for (const key of [oldSecret, newerSecret]) {
        const event = makeEvent({ aggregateId: `rotation-${key.slice(6, 12)}` })
        const { body, headers } = delivery(event, { secrets: key })
        expect((await request(app).post('/hooks').set(headers).send(body)).body.status).toBe('applied')
      }
      const { body, headers } = delivery(makeEvent({ aggregateId: 'rotation-other' }), {
        secrets: newSecret(),
      })
      expect((await request(app).post('/hooks').set(headers).send(body)).status).toBe(401)
      expect(await countRows(t.db, 'processed_events')).toBe(2)
      await t.db.deleteFrom('processed_events').execute()
      await t.db.deleteFrom('consumer_cursors').execute()
      await t.db.deleteFrom('effects').execute()
    })

    it('accepts a producer that signs with both secrets while the consumer knows only one', async () => {
      const onlyOld = signedApp(oldSecret)
      const onlyNew = signedApp(newerSecret)
      for (const [name, consumer] of [
        ['old', onlyOld],
        ['new', onlyNew],
      ] as const) {
        const event = makeEvent({ aggregateId: `both-${name}` })
        const { body, headers } = delivery(event, { secrets: [newerSecret, oldSecret] })
        expect(headers['webhook-signature']?.split(' ')).toHaveLength(2)
        expect((await request(consumer.app).post('/hooks').set(headers).send(body)).body.status).toBe(
          'applied',
        )
      }
      await t.db.deleteFrom('processed_events').execute()
      await t.db.deleteFrom('consumer_cursors').execute()
      await t.db.deleteFrom('effects').execute()
    })
  })
})

/** One POST on its own connection; an array header value goes on the wire as one header line per entry. */
function postRepeated(
  url: string,
  body: string,
  headers: Record<string, string | string[]>,
): Promise<{ status: number; json: any }> {
  return new Promise((resolve, reject) => {
    const req = httpRequest(`${url}/hooks`, { method: 'POST', headers, agent: false }, (res) => {
      const chunks: Buffer[] = []
      res.on('data', (chunk: Buffer) => chunks.push(chunk))
      res.on('end', () =>
        resolve({ status: res.statusCode ?? 0, json: JSON.parse(Buffer.concat(chunks).toString('utf8')) }),
      )
      res.on('error', reject)
    })
    req.on('error', reject)
    req.end(body)
  })
}

describe('webhook-signature sent twice, over real HTTP', () => {
  /** Signatures of one attempt: by the consumer's secret, and by two secrets it does not know. */
  function attempt(aggregateId: string) {
    const event = makeEvent({ aggregateId })
    const signed = delivery(event, { secrets: secret })
    const good = signed.headers['webhook-signature']!
    const [wrong, alsoWrong] = [newSecret(), newSecret()].map(
      (other) =>
        signWithStandardWebhooks(
          other,
          event.eventId,
          signed.body,
          new Date(Number(signed.headers['webhook-timestamp']) * 1000),
        )['webhook-signature'],
    )
    return { event, body: signed.body, headers: signed.headers, good, wrong: wrong!, alsoWrong: alsoWrong! }
  }

  /** Runs `send` against `consumer.node` and Express `dedupe`, each on its own loopback server. */
  async function eachServer(
    run: (url: string, name: string, signatureLines: () => number[]) => Promise<void>,
  ): Promise<void> {
    const consumer = createConsumer({ db: t.db, secret, logger: quiet })
    const lines: number[] = []
    const node = consumer.node(async (event, trx) => writeEffect(trx, event))
    const servers = [
      {
        name: 'node',
        started: await listen((req, res) => {
          // What arrived on the wire: one raw header line per signature header sent.
          lines.push(
            req.rawHeaders.filter((name, i) => i % 2 === 0 && /^webhook-signature$/i.test(name)).length,
          )
          node(req, res)
        }),
      },
      {
        name: 'express',
        started: await listen(appWith(consumer.dedupe(async (event, trx) => writeEffect(trx, event)))),
      },
    ]
    try {
      for (const { name, started } of servers) await run(started.url, name, () => lines)
    } finally {
      for (const { started } of servers) await started.close()
    }
  }

  it('applies the event when either of two signature headers matches, in either order', async () => {
    await eachServer(async (url, name, signatureLines) => {
      for (const order of ['good-first', 'good-last'] as const) {
        const { event, body, headers, good, wrong } = attempt(`twice-${name}-${order}`)
        const answer = await postRepeated(url, body, {
          ...headers,
          'webhook-signature': order === 'good-first' ? [good, wrong] : [wrong, good],
        })
        expect(answer.status, JSON.stringify(answer.json)).toBe(200)
        expect(answer.json.status).toBe('applied')
        expect(await recorded(t.db, event)).toEqual({ processed: 1, effects: 1, cursor: 1 })
      }
      if (name === 'node') expect(signatureLines()).toEqual([2, 2])
    })
  })

  it('refuses 401 invalid_signature when neither of two signature headers matches', async () => {
    await eachServer(async (url, name) => {
      const { body, headers, wrong, alsoWrong } = attempt(`twice-forged-${name}`)
      const before = await countRows(t.db, 'processed_events')
      const answer = await postRepeated(url, body, { ...headers, 'webhook-signature': [wrong, alsoWrong] })
      expect(answer.status).toBe(401)
      expect(answer.json).toMatchObject({ status: 401, code: 'invalid_signature' })
      expect(await countRows(t.db, 'processed_events')).toBe(before)
    })
  })
})
