import { useTestDatabase } from '@outbox/test-harness'
import { sql } from 'kysely'
import { beforeAll, describe, expect, it } from 'vitest'
import { HELP } from '../src/cli/help-text.js'
import { checkIntegrity, DEFAULT_LEASE_MS, DEFAULT_OVERDUE_AFTER_MS, migrate } from '../src/index.js'
import { buildCli, type CliResult, cliEnv, expectFailure, REFUSED_URL, runCli } from './cli-process.js'
import { seedEvents } from './support.js'

const t = useTestDatabase()

/** The implicit subscription, as violations, findings and repairs of a single-endpoint outbox name it. */
const IMPLICIT = { subscriptionId: '00000000-0000-0000-0000-000000000000', subscriptionName: 'default' }

beforeAll(() => buildCli(), 120_000)

// Every test plants its damage in a schema of its own, so they run concurrently on the one database.

/** A migrated schema with two pending events (due now) for each aggregate. */
async function outbox(schema: string, aggregates: readonly string[]): Promise<void> {
  await migrate(t.db, { schema })
  await seedEvents(t.db, aggregates, 2, { schema })
}

/**
 * The three kinds of damage the repair must mend: `exhausted` blocked as exhausted with events pending and no dead
 * letter (it was pruned); `infinity` holding a pending event at 'infinity' in a lane nothing blocks; `conflict`
 * parked by a 409 with nothing pending. `fine` stays healthy and must never be reported.
 */
async function plantViolations(schema: string): Promise<void> {
  await outbox(schema, ['exhausted', 'infinity', 'conflict', 'fine'])
  const outboxTable = sql.id(schema, 'outbox')
  const lane = sql.id(schema, 'outbox_lane')
  await sql`UPDATE ${lane} SET blocked_reason = 'exhausted', blocked_at = now() WHERE aggregate_id = 'exhausted'`.execute(
    t.db,
  )
  await sql`UPDATE ${outboxTable} SET available_at = 'infinity' WHERE aggregate_id = 'infinity' AND sequence = 2`.execute(
    t.db,
  )
  await sql`UPDATE ${outboxTable} SET status = 'sent', sent_at = now() WHERE aggregate_id = 'conflict'`.execute(
    t.db,
  )
  await sql`UPDATE ${lane} SET blocked_reason = 'conflict', blocked_at = now() WHERE aggregate_id = 'conflict'`.execute(
    t.db,
  )
}

function doctor(schema: string, ...args: string[]): Promise<CliResult> {
  return runCli(['doctor', ...args], cliEnv({ DATABASE_URL: t.url, OUTBOX_SCHEMA: schema }))
}

function lines(result: CliResult): string[] {
  return result.stdout.trimEnd().split('\n')
}

describe.concurrent('outbox doctor', () => {
  it('says "no violations" and exits 0 on a healthy outbox', async () => {
    await outbox('healthy', ['a', 'b'])
    const [text, json] = await Promise.all([doctor('healthy'), doctor('healthy', '--json')])
    expect(text).toMatchObject({ code: 0, stdout: 'no violations\n', stderr: '' })
    expect(json, json.stderr).toMatchObject({ code: 0, stderr: '' })
    expect(JSON.parse(json.stdout)).toEqual({ ok: true, violations: [], findings: [], warnings: [] })
  })

  it('lists each broken rule with its lane and detail, and exits 4', async () => {
    await plantViolations('broken')
    const result = await doctor('broken')
    expect(result.code, result.stderr).toBe(4)
    expect(result.stderr).toBe('')
    const printed = lines(result)
    expect(printed[0]).toBe('violations:')
    expect(printed).toContainEqual(
      expect.stringMatching(
        /^ {2}blocked_without_dead_letter\s+order:exhausted\s+blocked as exhausted since .*, but no dead letter is left to redrive$/,
      ),
    )
    expect(printed).toContainEqual(
      expect.stringMatching(
        /^ {2}row_at_infinity\s+order:infinity\s+1 pending event\(s\) at infinity in a lane that is not blocked$/,
      ),
    )
    expect(printed).toContainEqual(
      expect.stringMatching(
        /^ {2}conflict_without_pending\s+order:conflict\s+parked by a 409 since .* with nothing pending$/,
      ),
    )
    expect(printed).toHaveLength(5)
    expect(printed.at(-1)).toBe('3 violations on 3 lanes: run outbox doctor --repair')
    expect(result.stdout).not.toContain('order:fine')
    // Read-only: the same damage is there after the check.
    expect((await checkIntegrity(t.db, { schema: 'broken' })).violations).toHaveLength(3)
  })

  it('--json prints the library report as one document, with the same exit code', async () => {
    await plantViolations('broken_json')
    const result = await doctor('broken_json', '--json')
    expect(result.code, result.stderr).toBe(4)
    expect(result.stderr).toBe('')
    const printed = JSON.parse(result.stdout)
    expect(Object.keys(printed)).toEqual(['ok', 'violations', 'findings', 'warnings'])
    expect(printed.ok).toBe(false)
    expect(
      printed.violations
        .map((v: { kind: string; aggregateId: string }) => `${v.kind} ${v.aggregateId}`)
        .sort(),
    ).toEqual([
      'blocked_without_dead_letter exhausted',
      'conflict_without_pending conflict',
      'row_at_infinity infinity',
    ])
    expect(printed).toEqual(await checkIntegrity(t.db, { schema: 'broken_json' }))
  })

  it('--repair mends every lane, says what it did, exits 0, and a later check is clean', async () => {
    await plantViolations('repairing')
    const result = await doctor('repairing', '--repair')
    expect(result.code, `${result.stdout}\n${result.stderr}`).toBe(0)
    expect(result.stderr).toBe('')
    const printed = lines(result)
    expect(printed[0]).toBe('repaired 3 lanes, skipped 0:')
    expect(printed).toContainEqual(
      expect.stringMatching(
        /^ {2}repaired\s+order:exhausted\s+blocked_without_dead_letter\s+unblocked it: the dead letter that blocked it is gone/,
      ),
    )
    expect(printed).toContainEqual(
      expect.stringMatching(
        /^ {2}repaired\s+order:infinity\s+row_at_infinity\s+made 1 event\(s\) held at infinity due now$/,
      ),
    )
    expect(printed).toContainEqual(
      expect.stringMatching(/^ {2}repaired\s+order:conflict\s+conflict_without_pending\s+cleared a 409 park/),
    )
    expect(printed.slice(-2)).toEqual(['after the repair:', 'no violations'])

    const { rows } = await sql<{ aggregate_id: string; blocked_reason: string | null }>`
      SELECT aggregate_id, blocked_reason FROM repairing.outbox_lane ORDER BY aggregate_id`.execute(t.db)
    expect(rows.every((row) => row.blocked_reason === null)).toBe(true)
    const { rows: infinite } = await sql`
      SELECT 1 FROM repairing.outbox WHERE available_at = 'infinity'`.execute(t.db)
    expect(infinite).toEqual([])

    const again = await doctor('repairing')
    expect(again).toMatchObject({ code: 0, stdout: 'no violations\n', stderr: '' })
  })

  it('--repair --json prints {lanes, after}', async () => {
    await plantViolations('repairing_json')
    const result = await doctor('repairing_json', '--repair', '--json')
    expect(result.code, result.stderr).toBe(0)
    const printed = JSON.parse(result.stdout)
    expect(Object.keys(printed)).toEqual(['lanes', 'after'])
    expect(printed.after).toEqual({ ok: true, violations: [], findings: [], warnings: [] })
    const byLane = Object.fromEntries(
      printed.lanes.map((lane: { aggregateId: string }) => [lane.aggregateId, lane]),
    )
    expect(Object.keys(byLane).sort()).toEqual(['conflict', 'exhausted', 'infinity'])
    expect(byLane.infinity).toEqual({
      outcome: 'repaired',
      actions: ['made 1 event(s) held at infinity due now'],
      aggregateType: 'order',
      ...IMPLICIT,
      aggregateId: 'infinity',
      kinds: ['row_at_infinity'],
    })
    expect(byLane.exhausted).toMatchObject({ outcome: 'repaired', kinds: ['blocked_without_dead_letter'] })
  })

  it('--repair skips a lane under a live lease, says so, and exits 4 while its violation remains', async () => {
    await outbox('leased', ['held'])
    await sql`UPDATE leased.outbox SET available_at = 'infinity' WHERE aggregate_id = 'held' AND sequence = 2`.execute(
      t.db,
    )
    await sql`UPDATE leased.outbox_lane SET claim_token = gen_random_uuid(), leased_until = now() + interval '1 minute'
      WHERE aggregate_id = 'held'`.execute(t.db)
    const result = await doctor('leased', '--repair')
    expect(result.code, result.stderr).toBe(4)
    const printed = lines(result)
    expect(printed[0]).toBe('repaired 0 lanes, skipped 1:')
    expect(printed[1]).toMatch(
      /^ {2}skipped\s+order:held\s+row_at_infinity\s+a relay holds it under a live lease; run again later$/,
    )
    expect(printed.slice(2)).toEqual([
      'after the repair:',
      'violations:',
      expect.stringMatching(/^ {2}row_at_infinity\s+order:held\s+1 pending event\(s\) at infinity/),
      '1 violation on 1 lane: run outbox doctor --repair',
    ])
    // Nothing under the lease was touched.
    const { rows } = await sql`SELECT 1 FROM leased.outbox WHERE available_at = 'infinity'`.execute(t.db)
    expect(rows).toHaveLength(1)

    const json = await doctor('leased', '--repair', '--json')
    expect(json.code).toBe(4)
    const report = JSON.parse(json.stdout)
    expect(report.lanes).toEqual([
      {
        outcome: 'skipped',
        reason: 'a relay holds it under a live lease; run again later',
        aggregateType: 'order',
        ...IMPLICIT,
        aggregateId: 'held',
        kinds: ['row_at_infinity'],
      },
    ])
    expect(report.after.ok).toBe(false)
  })

  it('reports a lease longer than --max-lease (default: the library lease), and never shortens it', async () => {
    await outbox('long_lease', ['slow'])
    await sql`UPDATE long_lease.outbox_lane SET claim_token = gen_random_uuid(), leased_until = now() + interval '10 minutes'
      WHERE aggregate_id = 'slow'`.execute(t.db)
    const [byDefault, matching, repair] = await Promise.all([
      doctor('long_lease'),
      doctor('long_lease', '--max-lease', '15m'),
      doctor('long_lease', '--repair'),
    ])
    expect(byDefault.code, byDefault.stderr).toBe(4)
    expect(byDefault.stdout).toMatch(
      new RegExp(
        `^ {2}lease_too_long\\s+order:slow\\s+leased until .*, more than ${DEFAULT_LEASE_MS} ms from now$`,
        'm',
      ),
    )
    expect(lines(byDefault).at(-1)).toBe(
      "1 violation on 1 lane: check --max-lease against your relays' --lease (a repair never shortens a lease)",
    )
    expect(matching).toMatchObject({ code: 0, stdout: 'no violations\n' })
    expect(repair.code).toBe(4)
    expect(lines(repair)[0]).toBe('nothing to repair')
    expect(repair.stdout).toContain('lease_too_long')
  })

  it('shows an overdue head no relay holds as a finding that does not fail the check', async () => {
    await outbox('idle', ['late', 'recent'])
    await sql`UPDATE idle.outbox SET available_at = now() - interval '1 hour' WHERE aggregate_id = 'late' AND sequence = 1`.execute(
      t.db,
    )
    const [text, json, patient] = await Promise.all([
      doctor('idle'),
      doctor('idle', '--json'),
      doctor('idle', '--overdue-after', '2h'),
    ])
    expect(text.code, text.stderr).toBe(0)
    const printed = lines(text)
    expect(printed).toHaveLength(3)
    expect(printed[0]).toBe('findings (not violations):')
    expect(printed[1]).toMatch(
      /^ {2}overdue_head\s+order:late\s+head \(sequence 1\) due for 36\d\d s and no relay holds it: are relays running\?$/,
    )
    expect(printed[2]).toBe('no violations; 1 overdue head no relay holds (is a relay running?)')
    expect(json.code).toBe(0)
    const report = JSON.parse(json.stdout)
    expect(report).toMatchObject({ ok: true, violations: [] })
    expect(report.findings).toEqual([
      expect.objectContaining({ kind: 'overdue_head', aggregateId: 'late', sequence: 1 }),
    ])
    expect(report.findings[0].overdueSeconds).toBeGreaterThanOrEqual(3600)
    expect(patient).toMatchObject({ code: 0, stdout: 'no violations\n' })
  })

  it('says on stderr when --limit may have cut the report', async () => {
    await outbox('many', ['x', 'y', 'z'])
    await sql`UPDATE many.outbox SET available_at = 'infinity' WHERE sequence = 2`.execute(t.db)
    const result = await doctor('many', '--limit', '2', '--json')
    expect(result.code).toBe(4)
    expect(JSON.parse(result.stdout).violations).toHaveLength(2)
    expect(result.stderr).toBe(
      'more may follow: at most 2 lanes are listed per rule; raise --limit to see more\n',
    )
  })

  it('rejects bad flags with one line and exit 2, before connecting', async () => {
    const env = cliEnv({ DATABASE_URL: REFUSED_URL })
    const cases: [string[], RegExp][] = [
      [['--limit', '0'], /--limit must be an integer from 1 to 10000, got "0"/],
      [['--limit', 'lots'], /--limit must be an integer/],
      [['--max-lease', 'long'], /--max-lease must be a duration like 30d, 12h, 15m, 90s or 500ms/],
      [['--max-lease', '0'], /--max-lease must be a duration at least 1ms, got "0"/],
      [['--overdue-after', 'soon'], /--overdue-after must be a duration like 30d, 12h, 15m, 90s or 500ms/],
      [['--overdue-after', '0'], /--overdue-after must be at least 1ms, got "0"/],
      [['--repiar'], /unknown option --repiar \(see outbox doctor --help\)/],
      [['--json=yes'], /--json takes no value/],
      [['--limit'], /--limit needs a value/],
      [['now'], /unexpected argument "now"/],
      [['--schema', 'Bad-Name'], /--schema must be a lower-case SQL identifier/],
    ]
    const results = await Promise.all(cases.map(([args]) => runCli(['doctor', ...args], env)))
    for (const [index, result] of results.entries()) expectFailure(result, 2, cases[index]![1])
    expectFailure(await runCli(['doctor'], cliEnv()), 2, /no database: set DATABASE_URL/)
    // The same flags, well formed, do reach the database: the failures above were not the refused connection.
    expectFailure(
      await runCli(['doctor', '--limit', '5', '--overdue-after', '10m', '--max-lease', '1s'], env),
      1,
      /cannot connect to PostgreSQL at 127\.0\.0\.1:1: connection refused/,
    )
  })

  it('has a help page listed in outbox --help that quotes the library defaults', async () => {
    const [top, page] = await Promise.all([
      runCli(['--help'], cliEnv()),
      runCli(['doctor', '--help'], cliEnv()),
    ])
    expect(top.stdout).toMatch(/^ {2}doctor\s+check that every lane can move/m)
    expect(top.stdout).toContain('4 doctor found violations')
    expect(page).toMatchObject({ code: 0, stderr: '', stdout: HELP.doctor })
    expect(HELP.doctor.startsWith('Usage: outbox doctor')).toBe(true)
    expect(HELP.doctor).toContain(`the longest lease your relays take (default ${DEFAULT_LEASE_MS / 1000}s)`)
    expect(HELP.doctor).toContain("pass your relays' --lease")
    expect(HELP.doctor).toContain(`is a finding (default ${DEFAULT_OVERDUE_AFTER_MS / 60_000}m)`)
  })
})
