import type { Reporter, TestModule } from 'vitest/node'
import { REQUIRE_ALL_VARIABLE, REQUIREMENT_NOTE_PREFIX } from './requirement.js'

/**
 * Prints one line per test skipped for a missing requirement at the end of the run, after the summary, e.g.
 * `[requirements] skipped: console browser suite — no Chromium found (set CHROMIUM_PATH)`: a contributor sees what
 * did not run on their machine and how to provide it, without reading the skipped tests' names. Under
 * `OUTBOX_REQUIRE_ALL=1` these tests fail instead, and the line says so.
 *
 * @example
 * ```ts
 * // vitest.config.ts
 * export default defineConfig({ test: { reporters: ['default', './test/harness/src/requirement-reporter.ts'] } })
 * ```
 */
export class RequirementReporter implements Reporter {
  /** Prints the lines; nothing when every requirement was met. */
  onTestRunEnd(testModules: ReadonlyArray<TestModule>): void {
    const lines = new Set<string>()
    for (const module of testModules)
      for (const test of module.children.allTests()) {
        const result = test.result()
        if (result.state === 'skipped' && result.note?.startsWith(REQUIREMENT_NOTE_PREFIX))
          lines.add(`[requirements] skipped: ${result.note.slice(REQUIREMENT_NOTE_PREFIX.length)}`)
        else if (result.state === 'failed')
          for (const error of result.errors)
            if (error.message.endsWith(`(required: ${REQUIRE_ALL_VARIABLE}=1)`))
              lines.add(`[requirements] FAILED: ${error.message}`)
      }
    if (lines.size > 0) console.log(`\n${[...lines].join('\n')}`)
  }
}

/** Vitest loads a reporter named by path from its default export: the one default export here, for that reason. */
export default RequirementReporter
