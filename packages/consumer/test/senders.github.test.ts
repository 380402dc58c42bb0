import { createHmac, randomBytes, randomUUID } from 'node:crypto'
import { sign } from '@octokit/webhooks-methods'
import { useTestDatabase } from '@outbox/test-harness'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { createConsumer, githubEnvelope, githubVerifier, OutboxError } from '../src/index.js'
import {
  createReceivedEffects,
  effectsOf,
  postUnfinished,
  processedRows,
  serve,
  writeReceived,
} from './sender-support.js'
import { post, quiet } from './support.js'

const t = useTestDatabase()
const secret = randomBytes(20).toString('hex')
let server: { url: string; close: () => Promise<void> }
let calls = 0

beforeAll(async () => {
  await createReceivedEffects(t.db)
  const consumer = createConsumer({
    db: t.db,
    verify: githubVerifier(secret),
    envelope: githubEnvelope,
    source: 'github',
    logger: quiet,
  })
  server = await serve(
    consumer.node(async (event, trx) => {
      calls++
      await writeReceived(trx, event)
    }),
  )
})

afterAll(async () => {
  await server?.close()
})

/** An `issues` delivery as GitHub sends it (trimmed to a few fields). */
function issuesOpened() {
  return {
    action: 'opened',
    issue: { number: Math.floor(Math.random() * 1e6), title: 'Events arrive twice' },
    repository: { full_name: 'outbox-js/outbox' },
    sender: { login: 'octocat' },
  }
}

/** The headers of one delivery, signed by `@octokit/webhooks-methods` as GitHub signs. */
async function delivered(
  event: string,
  payload: string,
  options: { delivery?: string; secret?: string } = {},
): Promise<Record<string, string>> {
  return {
    'content-type': 'application/json',
    'user-agent': 'GitHub-Hookshot/4f1c2a3',
    'x-github-event': event,
    'x-github-delivery': options.delivery ?? randomUUID(),
    'x-github-hook-id': '123456',
    'x-hub-signature-256': await sign(options.secret ?? secret, payload),
  }
}

async function nothingRecorded(delivery: string) {
  expect(await processedRows(t.db, 'github', delivery)).toEqual([])
  expect(await effectsOf(t.db, delivery)).toEqual([])
}

describe('GitHub: githubVerifier + githubEnvelope under sequence off', () => {
  it('applies a delivery signed by @octokit/webhooks-methods once; its redelivery is duplicate_ignored', async () => {
    const body = issuesOpened()
    const payload = JSON.stringify(body)
    const headers = await delivered('issues', payload)
    const delivery = headers['x-github-delivery']!
    const before = calls

    const first = await post(server.url, payload, headers)
    expect(first.status).toBe(200)
    expect(first.json).toEqual({ status: 'applied', eventId: delivery })
    expect(await effectsOf(t.db, delivery)).toEqual([
      { type: 'issues.opened', data: body, occurred_at: null },
    ])
    expect(await processedRows(t.db, 'github', delivery)).toMatchObject([
      { source: 'github', event_id: delivery, type: 'issues.opened', aggregate_id: null, sequence: null },
    ])

    // A redelivery (from the UI or the API) keeps the X-GitHub-Delivery GUID and the body.
    const again = await post(server.url, payload, await delivered('issues', payload, { delivery }))
    expect(again.status).toBe(200)
    expect(again.json).toEqual({ status: 'duplicate_ignored', eventId: delivery })
    expect(calls).toBe(before + 1)
    expect(await effectsOf(t.db, delivery)).toHaveLength(1)
  })

  it('types an event without an action by its X-GitHub-Event alone', async () => {
    const body = { ref: 'refs/heads/main', before: '0'.repeat(40), after: 'a'.repeat(40), commits: [] }
    const payload = JSON.stringify(body)
    const headers = await delivered('push', payload)
    const answer = await post(server.url, payload, headers)
    expect(answer.json).toMatchObject({ status: 'applied' })
    expect(await effectsOf(t.db, headers['x-github-delivery']!)).toMatchObject([{ type: 'push' }])
  })

  it('refuses a tampered body with 401 invalid_signature and records nothing', async () => {
    const payload = JSON.stringify(issuesOpened())
    const headers = await delivered('issues', payload)
    const tampered = payload.replace('"opened"', '"deleted"')
    expect(tampered).not.toBe(payload)
    const answer = await post(server.url, tampered, headers)
    expect(answer.status).toBe(401)
    expect(answer.json).toMatchObject({ status: 401, code: 'invalid_signature' })
    await nothingRecorded(headers['x-github-delivery']!)
  })

  it('refuses a delivery signed with another secret', async () => {
    const payload = JSON.stringify(issuesOpened())
    const headers = await delivered('issues', payload, { secret: 'another secret' })
    const answer = await post(server.url, payload, headers)
    expect(answer.json).toMatchObject({ status: 401, code: 'invalid_signature' })
    await nothingRecorded(headers['x-github-delivery']!)
  })

  it('refuses a request without X-Hub-Signature-256 (even with the SHA-1 one) before reading its body', async () => {
    const payload = JSON.stringify(issuesOpened())
    const { 'x-hub-signature-256': _signature, ...unsigned } = await delivered('issues', payload)
    const sha1 = `sha1=${createHmac('sha1', secret).update(payload).digest('hex')}`
    for (const headers of [
      unsigned,
      { ...unsigned, 'x-hub-signature': sha1 },
      { ...unsigned, 'x-hub-signature-256': 'sha256=not-hex' },
    ]) {
      const answer = await postUnfinished(server.url, headers, payload.slice(0, 10))
      expect(answer.status).toBe(401)
      expect(answer.headers.connection).toBe('close')
      expect(answer.json).toMatchObject({ code: 'missing_signature' })
    }
    await nothingRecorded(unsigned['x-github-delivery']!)
  })

  it('answers 400 invalid_envelope, nothing recorded, for a signed delivery without X-GitHub-Delivery', async () => {
    const payload = JSON.stringify(issuesOpened())
    const { 'x-github-delivery': delivery, ...headers } = await delivered('issues', payload)
    const before = calls
    const answer = await post(server.url, payload, headers)
    expect(answer.status).toBe(400)
    expect(answer.json).toMatchObject({
      code: 'invalid_envelope',
      errors: ['the X-GitHub-Delivery header is required'],
    })
    expect(calls).toBe(before)
    await nothingRecorded(delivery!)
  })
})

describe('githubVerifier options', () => {
  it('refuses an empty secret, and one with a trailing newline, at creation', () => {
    for (const bad of ['', `${secret}\n`, [] as string[]]) {
      expect(() => githubVerifier(bad)).toThrow(OutboxError)
    }
    expect(() => githubVerifier(`${secret}\n`)).toThrow(/whitespace/)
  })

  it('accepts any of several secrets, so the webhook secret can be changed', async () => {
    const rolled = createConsumer({
      db: t.db,
      verify: githubVerifier(['the new secret', secret]),
      envelope: githubEnvelope,
      source: 'github-rolled',
      logger: quiet,
    })
    const local = await serve(rolled.node((event, trx) => writeReceived(trx, event)))
    try {
      for (const key of ['the new secret', secret]) {
        const payload = JSON.stringify(issuesOpened())
        const answer = await post(local.url, payload, await delivered('issues', payload, { secret: key }))
        expect(answer.json).toMatchObject({ status: 'applied' })
      }
    } finally {
      await local.close()
    }
  })
})
