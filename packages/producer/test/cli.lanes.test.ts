import { userInfo } from 'node:os'
import { type Sink, startSink, useTestDatabase } from '@outbox/test-harness'
import { sql } from 'kysely'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { listAudit, listDeadLetters, Relay, silentLogger } from '../src/index.js'
import { buildCli, cliEnv, expectFailure, runCli } from './cli-process.js'
import { laneRows, seedEvents } from './support.js'

const t = useTestDatabase()
let sink: Sink
const env = () => cliEnv({ DATABASE_URL: t.url })

/** `stuck` blocked by its exhausted first event, `gap` parked by a 409 on its first event. */
beforeAll(async () => {
  buildCli()
  sink = await startSink((request) => {
    if (request.json.aggregate_id === 'stuck' && request.json.sequence === 1) {
      return { status: 500, body: { message: 'upstream exploded' } }
    }
    if (request.json.aggregate_id === 'gap') return { status: 409, body: { code: 'sequence_gap' } }
    return { status: 200, body: { status: 'applied' } }
  })
  await seedEvents(t.db, ['stuck', 'gap'], 2)
  await new Relay({
    db: t.db,
    endpoint: sink.url,
    retrySchedule: [],
    onExhausted: 'block',
    logger: silentLogger,
  }).runOnce()
})

afterAll(async () => {
  await sink.close()
})

describe('outbox lanes', () => {
  it('list --state blocked prints each lane with its reason, head and last failure', async () => {
    const result = await runCli(['lanes', 'list', '--state', 'blocked'], env())
    expect(result.code, result.stderr).toBe(0)
    const lines = result.stdout.trimEnd().split('\n')
    expect(lines[0]).toMatch(
      /^LANE\s+REASON\s+BLOCKER\s+HEAD\s+TYPE\s+ATTEMPTS\s+PENDING\s+LAST\s+ERROR\s+BLOCKED SINCE$/,
    )
    // Oldest block first: both came from one relay pass, so the test finds each lane by name.
    const stuck = lines.find((line) => line.startsWith('order/stuck'))
    const gap = lines.find((line) => line.startsWith('order/gap'))
    expect(stuck).toMatch(/^order\/stuck\s+exhausted\s+1\s+2\s+order\.updated\s+0\s+1\s+500\s+.*exploded/)
    expect(gap).toMatch(/^order\/gap\s+conflict\s+-\s+1\s+order\.updated\s+0\s+2\s+409\s/)
    expect(lines).toHaveLength(3)

    const json = await runCli(['lanes', 'list', '--state', 'blocked', '--json'], env())
    const lanes = JSON.parse(json.stdout)
    expect(
      lanes.map((lane: { aggregateId: string; reason: string }) => [lane.aggregateId, lane.reason]).sort(),
    ).toEqual([
      ['gap', 'conflict'],
      ['stuck', 'exhausted'],
    ])
    const none = await runCli(['lanes', 'list', '--state', 'leased'], env())
    expect(none.stdout).toBe('no leased lanes\n')
  })

  it('list refuses a missing or unknown --state and an unknown subscription', async () => {
    expectFailure(await runCli(['lanes', 'list'], env()), 2, /missing --state blocked\|struggling\|leased/)
    expectFailure(
      await runCli(['lanes', 'list', '--state', 'stuck'], env()),
      2,
      /--state must be one of blocked, struggling, leased/,
    )
    expectFailure(
      await runCli(['lanes', 'list', '--state', 'blocked', '--subscription', 'nosuch'], env()),
      2,
      /no subscription "nosuch"/,
    )
  })

  it('unblock resumes the blocked lane under --actor and records it; a second unblock is refused (exit 1)', async () => {
    const result = await runCli(
      ['lanes', 'unblock', '--subscription', 'default', '--aggregate', 'order/stuck', '--actor', 'alice'],
      env(),
    )
    expect(result.code, result.stderr).toBe(0)
    expect(result.stdout).toMatch(/^unblocked order\/stuck: 1 event\(s\) behind the blocker are due now/)
    expect(await laneRows(t.db, 'stuck')).toEqual([
      [1, 'dead', false],
      [2, 'pending', false],
    ])
    expect((await listAudit(t.db))[0]).toMatchObject({ actor: 'alice', action: 'lane.unblock' })

    expectFailure(
      await runCli(['lanes', 'unblock', '--aggregate', 'order/stuck'], env()),
      1,
      /lane order\/stuck of subscription 0{8}-.* is not blocked/,
    )
    expectFailure(await runCli(['lanes', 'unblock'], env()), 2, /missing --aggregate <type>\/<id>/)
  })

  it('skip-head dead-letters the head under the OS user by default, with the reason', async () => {
    const result = await runCli(
      ['lanes', 'skip-head', '--aggregate', 'order/gap', '--reason', 'TICKET-7'],
      env(),
    )
    expect(result.code, result.stderr).toBe(0)
    expect(result.stdout).toMatch(/^skipped order\/gap sequence 1 \(event [0-9a-f-]{36}, now a dead letter/)
    const user = userInfo().username || 'cli'
    const dead = (await listDeadLetters(t.db)).find((one) => one.aggregateId === 'gap')
    expect(dead).toMatchObject({ sequence: 1, lastError: `skipped by ${user}: TICKET-7` })
    expect((await listAudit(t.db))[0]).toMatchObject({ actor: user, action: 'lane.skip-head' })

    expectFailure(
      await runCli(['lanes', 'skip-head', '--aggregate', 'gap'], env()),
      2,
      /--aggregate takes <type>\/<id>/,
    )
    // One form everywhere: `type:id` is refused, not read as a second spelling.
    expectFailure(
      await runCli(['lanes', 'skip-head', '--aggregate', 'order:gap'], env()),
      2,
      /--aggregate takes <type>\/<id>, e\.g\. --aggregate order\/42; got "order:gap"/,
    )
    expectFailure(await runCli(['lanes', 'reset'], env()), 2, /unknown subcommand "reset"/)
  })
})

describe('outbox audit and doctor --repair --actor', () => {
  it('doctor --repair records its run under --actor; audit lists the log newest first', async () => {
    await seedEvents(t.db, ['damaged'], 1)
    await sql`UPDATE outbox SET available_at = 'infinity' WHERE aggregate_id = 'damaged'`.execute(t.db)
    const repair = await runCli(['doctor', '--repair', '--actor', 'doctor-bot'], env())
    expect(repair.code, repair.stdout + repair.stderr).toBe(0)
    expect((await listAudit(t.db))[0]).toMatchObject({ actor: 'doctor-bot', action: 'integrity.repair' })
    expectFailure(await runCli(['doctor', '--actor', 'x'], env()), 2, /--actor .* goes with --repair/)

    const text = await runCli(['audit'], env())
    expect(text.code, text.stderr).toBe(0)
    const lines = text.stdout.trimEnd().split('\n')
    expect(lines[0]).toMatch(/^ID\s+AT\s+ACTOR\s+ACTION\s+DETAIL$/)
    expect(lines.slice(1).map((line) => line.split(/\s+/)[3])).toEqual([
      'integrity.repair',
      'lane.skip-head',
      'lane.unblock',
    ])
    expect(lines[3]).toMatch(/alice\s+lane\.unblock\s+.*aggregateId=stuck/)

    const json = await runCli(['audit', '--json', '--limit', '1'], env())
    expect(JSON.parse(json.stdout)).toMatchObject([{ action: 'integrity.repair', actor: 'doctor-bot' }])
    expect(json.stderr).toMatch(/more may follow: outbox audit --limit 1 --before \d+/)
    expectFailure(await runCli(['audit', '--limit', '0'], env()), 2, /--limit must be/)
  })
})
