import { randomBytes } from 'node:crypto'
import { sign as octokitSign, verify as octokitVerify } from '@octokit/webhooks-methods'
import fc from 'fast-check'
import Stripe from 'stripe'
import { Webhook } from 'svix'
import { describe, expect, it } from 'vitest'
import {
  githubVerifier,
  stripeVerifier,
  svixVerifier,
  type WebhookVerifier,
  webhookHeaders,
} from '../src/index.js'
import { newSecret } from './support.js'

// Each sender's own library is the oracle: on authentic requests and on tampered ones (body, signature, secret),
// the shipped verifier must say what the sender's library says. No database: verifiers are pure.

const RUNS = 150
const encoder = new TextEncoder()

/** Our verdict on one request: the header check, then the signature check, as the consumer runs them. */
async function ours(
  verifier: WebhookVerifier,
  headers: Record<string, string>,
  body: string,
  now = new Date(),
) {
  const view = webhookHeaders(headers)
  return (
    verifier.checkHeaders?.(view, now) ?? (await verifier.verify(view, encoder.encode(body), now)) ?? 'ok'
  )
}

/** A change to a request that must make it inauthentic (unless it changed nothing). */
const tampering = fc.constantFrom('body', 'signature', 'secret', 'none')

describe('the shipped verifiers agree with each sender’s own library', () => {
  it('Stripe: stripe.webhooks.constructEvent', async () => {
    const secret = `whsec_${randomBytes(24).toString('hex')}`
    const verifier = stripeVerifier(secret)
    await fc.assert(
      fc.asyncProperty(fc.json(), tampering, fc.string({ minLength: 1 }), async (payload, change, noise) => {
        const header = Stripe.webhooks.generateTestHeaderString({
          payload,
          secret: change === 'secret' ? `whsec_${noise}` : secret,
        })
        const body = change === 'body' ? `${payload} ` : payload
        const signature =
          change === 'signature'
            ? header.replace(/v1=([0-9a-f])/, (_, c) => `v1=${c === '0' ? '1' : '0'}`)
            : header
        let theirs = 'ok'
        try {
          Stripe.webhooks.constructEvent(body, signature, secret)
        } catch {
          theirs = 'refused'
        }
        const verdict = await ours(verifier, { 'stripe-signature': signature }, body)
        expect(verdict === 'ok' ? 'ok' : 'refused').toBe(theirs)
        if (change === 'none') expect(verdict).toBe('ok')
      }),
      { numRuns: RUNS },
    )
  })

  it('GitHub: @octokit/webhooks-methods verify', async () => {
    const secret = randomBytes(16).toString('hex')
    const verifier = githubVerifier(secret)
    await fc.assert(
      fc.asyncProperty(fc.json(), tampering, fc.string({ minLength: 1 }), async (payload, change, noise) => {
        const signature = await octokitSign(change === 'secret' ? `${secret}${noise}` : secret, payload)
        const body = change === 'body' ? `${payload} ` : payload
        const header =
          change === 'signature'
            ? signature.replace(/=([0-9a-f])/, (_, c) => `=${c === '0' ? '1' : '0'}`)
            : signature
        const theirs = (await octokitVerify(secret, body, header)) ? 'ok' : 'refused'
        const verdict = await ours(verifier, { 'x-hub-signature-256': header }, body)
        expect(verdict === 'ok' ? 'ok' : 'refused').toBe(theirs)
        if (change === 'none') expect(verdict).toBe('ok')
      }),
      { numRuns: RUNS },
    )
  })

  it('Svix: svix Webhook.verify, under both header names', async () => {
    const secret = newSecret()
    const verifier = svixVerifier(secret)
    await fc.assert(
      fc.asyncProperty(
        fc.json(),
        tampering,
        fc.constantFrom('svix', 'webhook'),
        async (payload, change, prefix) => {
          const id = `msg_${randomBytes(8).toString('hex')}`
          const at = new Date()
          const signature = new Webhook(change === 'secret' ? newSecret() : secret).sign(id, at, payload)
          const body = change === 'body' ? `${payload} ` : payload
          const headers = {
            [`${prefix}-id`]: id,
            [`${prefix}-timestamp`]: String(Math.floor(at.getTime() / 1000)),
            [`${prefix}-signature`]:
              change === 'signature'
                ? signature.replace(/,([A-Za-z0-9])/, (_, c) => `,${c === 'A' ? 'B' : 'A'}`)
                : signature,
          }
          let theirs = 'ok'
          try {
            new Webhook(secret).verify(body, headers)
          } catch {
            theirs = 'refused'
          }
          const verdict = await ours(verifier, headers, body)
          expect(verdict === 'ok' ? 'ok' : 'refused').toBe(theirs)
          if (change === 'none') expect(verdict).toBe('ok')
        },
      ),
      { numRuns: RUNS },
    )
  })

  it('never throws on any signature header, only refuses', async () => {
    const verifiers: [WebhookVerifier, string][] = [
      [stripeVerifier(`whsec_${randomBytes(24).toString('hex')}`), 'stripe-signature'],
      [githubVerifier('secret'), 'x-hub-signature-256'],
      [svixVerifier(newSecret()), 'svix-signature'],
    ]
    await fc.assert(
      fc.asyncProperty(fc.string(), fc.string(), async (header, body) => {
        for (const [verifier, name] of verifiers) {
          const headers = {
            [name]: header,
            'svix-id': 'msg_1',
            'svix-timestamp': String(Math.floor(Date.now() / 1000)),
          }
          expect(await ours(verifier, headers, body)).not.toBe('ok')
        }
      }),
      { numRuns: RUNS },
    )
  })
})
