import { useTestDatabase } from '@outbox/test-harness'
import { afterEach, describe, expect, it } from 'vitest'
import { createConsumer } from '../src/index.js'
import { type Running, startServer } from './servers.js'
import { delivery, makeEvent, newSecret, post, recordingLogger, until } from './support.js'

const t = useTestDatabase()

const running: Running[] = []
afterEach(async () => {
  for (const server of running.splice(0)) await server.close()
})

describe('a flood of refusals', () => {
  it('is one warn line per code per interval with a count; each request is at debug', async () => {
    const logger = recordingLogger()
    // An interval longer than the flood: everything after each code's first line is counted, not written.
    const consumer = createConsumer({ db: t.db, secret: newSecret(), logger, logIntervalMs: 600_000 })
    const server = await startServer('node', consumer, { handler: () => {} })
    running.push(server)

    const forged = delivery(makeEvent(), { secrets: newSecret() }) // another secret: invalid_signature
    const unsigned = delivery(makeEvent()) // no signature headers: missing_signature
    for (let n = 0; n < 40; n++) {
      await post(server.url, forged.body, forged.headers)
      await post(server.url, unsigned.body, unsigned.headers)
    }

    const warns = logger.lines.filter((line) => line.level === 'warn' && line.meta?.code !== undefined)
    expect(warns.map((line) => [line.meta?.code, line.meta?.count])).toEqual([
      ['invalid_signature', 1],
      ['missing_signature', 1],
    ])
    expect(logger.lines.filter((line) => line.level === 'debug')).toHaveLength(80)
  })

  it('writes the counted rest as one line when the interval ends', async () => {
    const logger = recordingLogger()
    const consumer = createConsumer({ db: t.db, secret: newSecret(), logger, logIntervalMs: 200 })
    const server = await startServer('node', consumer, { handler: () => {} })
    running.push(server)
    const unsigned = delivery(makeEvent())
    for (let n = 0; n < 10; n++) await post(server.url, unsigned.body, unsigned.headers)

    const counted = () =>
      logger.lines
        .filter((line) => line.level === 'warn' && line.meta?.code === 'missing_signature')
        .reduce((sum, line) => sum + Number(line.meta?.count), 0)
    await until(() => counted() === 10, 'the counted refusals to be written')
    const warns = logger.lines.filter((line) => line.level === 'warn' && line.meta?.code !== undefined)
    // However fast or slow the ten came, each line stands for at least one and together they count every refusal.
    expect(warns.length).toBeLessThanOrEqual(10)
    for (const line of warns) expect(line.meta).toMatchObject({ code: 'missing_signature', status: 401 })
  })
})
