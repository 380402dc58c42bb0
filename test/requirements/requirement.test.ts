/**
 * The one rule for skips: a suite that needs something a contributor's machine may lack (`requires`) is skipped
 * with one line in the run's summary, and fails instead under `OUTBOX_REQUIRE_ALL=1` (set by `.ci/run`). A child
 * vitest runs a fixture with one requirement met and one missing, under each setting. No other skip is allowed:
 * the test sources are searched for one.
 */
import { execFile } from 'node:child_process'
import { type Dirent, readdirSync, readFileSync } from 'node:fs'
import { join, relative } from 'node:path'
import { fileURLToPath } from 'node:url'
import { CHROMIUM_PATHS, findChromium } from '@outbox/test-harness'
import { describe, expect, it } from 'vitest'

const REPO_ROOT = fileURLToPath(new URL('../../', import.meta.url))
const FIXTURE = fileURLToPath(new URL('./fixture/', import.meta.url))
const VITEST = join(REPO_ROOT, 'node_modules/vitest/vitest.mjs')

/** Runs the fixture in a child vitest; resolves with its exit code and everything it printed. */
function runFixture(requireAll: boolean): Promise<{ code: number; output: string }> {
  const env: NodeJS.ProcessEnv = { ...process.env, NO_COLOR: '1', FORCE_COLOR: '0' }
  delete env.OUTBOX_REQUIRE_ALL
  if (requireAll) env.OUTBOX_REQUIRE_ALL = '1'
  return new Promise((resolve) => {
    execFile(
      process.execPath,
      [VITEST, 'run', '--config', join(FIXTURE, 'vitest.config.ts'), '--root', FIXTURE],
      { env, cwd: FIXTURE },
      (error, stdout, stderr) =>
        resolve({ code: error ? Number(error.code ?? 1) : 0, output: `${stdout}\n${stderr}` }),
    )
  })
}

/** Test sources: every .ts under a test folder, but the requirement mechanism's own. */
function testSources(): string[] {
  const roots = [
    'test',
    'bench/test',
    ...['packages', 'examples'].flatMap((parent) =>
      readdirSync(join(REPO_ROOT, parent)).map((name) => `${parent}/${name}/test`),
    ),
  ]
  const files: string[] = []
  const walk = (dir: string) => {
    let entries: Dirent[]
    try {
      entries = readdirSync(dir, { withFileTypes: true })
    } catch {
      return
    }
    for (const entry of entries) {
      const path = join(dir, entry.name)
      if (entry.isDirectory() && entry.name !== 'node_modules') walk(path)
      else if (/\.(ts|mts|cts)$/.test(entry.name)) files.push(path)
    }
  }
  for (const root of roots) walk(join(REPO_ROOT, root))
  // The mechanism and its own test (with its fixture of made-up requirements) name the skips they implement.
  const own = [join(REPO_ROOT, 'test/requirements/'), join(REPO_ROOT, 'test/harness/src/requirement.ts')]
  return files.filter((file) => !own.some((path) => file.startsWith(path)))
}

describe('requires()', () => {
  it('skips a suite whose requirement is missing, with one summary line, and runs the others', async () => {
    const { code, output } = await runFixture(false)
    expect(code, output).toBe(0)
    expect(output).toMatch(/Tests\s+1 passed \| 2 skipped \(3\)/)
    const lines = output.split('\n').filter((line) => line.startsWith('[requirements]'))
    // One line per missing requirement, however many of its tests were skipped.
    expect(lines).toEqual(['[requirements] skipped: fake suite — no fake thing (set FAKE_PATH)'])
  }, 60_000)

  it('fails a suite whose requirement is missing under OUTBOX_REQUIRE_ALL=1', async () => {
    const { code, output } = await runFixture(true)
    expect(code, output).toBe(1)
    expect(output).toMatch(/Tests\s+2 failed \| 1 passed \(3\)/)
    expect(output).toContain(
      '[requirements] FAILED: fake suite — no fake thing (set FAKE_PATH) (required: OUTBOX_REQUIRE_ALL=1)',
    )
    expect(output).not.toContain('[requirements] skipped')
  }, 60_000)
})

describe('findChromium()', () => {
  it('takes CHROMIUM_PATH alone when set, else the first usual path that is an executable', () => {
    const node = process.execPath
    expect(findChromium({ CHROMIUM_PATH: node }, [])).toEqual({ available: true, value: node })
    expect(findChromium({ CHROMIUM_PATH: '/nonexistent/chrome' }, [node])).toEqual({
      available: false,
      missing: 'CHROMIUM_PATH=/nonexistent/chrome is not an executable file',
    })
    expect(findChromium({}, ['/nonexistent/chromium', node])).toEqual({ available: true, value: node })
    expect(findChromium({}, ['/nonexistent/chromium'])).toEqual({
      available: false,
      missing: 'no Chromium found (set CHROMIUM_PATH)',
    })
    expect(CHROMIUM_PATHS).toContain('/usr/bin/chromium')
  })
})

describe('the only allowed skip', () => {
  it('no test is skipped, made conditional or left to do except through requires()', () => {
    const skip = /\b(it|test|describe|suite)\.(skip|skipIf|runIf|todo)\b|\b(ctx|context)\.skip\(/
    const offenders = testSources().flatMap((file) =>
      readFileSync(file, 'utf8')
        .split('\n')
        .flatMap((line, index) =>
          skip.test(line) ? [`${relative(REPO_ROOT, file)}:${index + 1}: ${line.trim()}`] : [],
        ),
    )
    expect(testSources().length).toBeGreaterThan(50)
    expect(offenders).toEqual([])
  })
})

describe("the README's test section", () => {
  it('names every requirement a suite declares', () => {
    const readme = readFileSync(join(REPO_ROOT, 'README.md'), 'utf8')
    const section = readme.slice(readme.indexOf('## Run the tests'), readme.indexOf('## CI'))
    const declared = testSources().flatMap((file) =>
      [...readFileSync(file, 'utf8').matchAll(/\brequires\(\s*'([^']+)'/g)].map((match) => match[1]!),
    )
    expect(declared).toEqual(
      expect.arrayContaining([
        'console browser suite',
        'CLI terminal tests',
        'readiness probe from another address',
      ]),
    )
    expect(declared.filter((suite) => !section.includes(`| ${suite}`))).toEqual([])
  })
})
