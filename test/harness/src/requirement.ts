import { describe, it, type TestFunction } from 'vitest'

/**
 * Whether something a suite needs from the machine is there: a browser, a server, a command. Found, it carries what
 * the suite uses (e.g. the browser's path); missing, it says what is missing and how to provide it, in one line.
 *
 * @example
 * ```ts
 * const script: Availability<string> = { available: false, missing: 'no `script` command (util-linux)' }
 * ```
 */
export type Availability<T> =
  | { readonly available: true; readonly value: T }
  | { readonly available: false; readonly missing: string }

/**
 * The environment variable that turns every missing requirement into a failure (`.ci/run` sets it to `1`): where the
 * machine is meant to have everything, a silent skip would hide a suite that never ran.
 */
export const REQUIRE_ALL_VARIABLE = 'OUTBOX_REQUIRE_ALL'

/**
 * How a skip for a missing requirement starts its note (`ctx.skip(note)`): the requirement reporter prints these
 * notes, and only these, as the run's summary of what did not run.
 */
export const REQUIREMENT_NOTE_PREFIX = '[requirement] '

/** Suites and tests that run only when their requirement is met; see {@link requires}. */
export interface Requirement<T> {
  /** What the suite uses when the requirement is met; throws when it is missing (only reached by a mistake). */
  readonly value: T
  /** True when the requirement is met. */
  readonly available: boolean
  /**
   * A `describe` whose body is collected only when the requirement is met. Missing, it holds one test that is
   * skipped with a note naming the suite and what is missing — or fails, under `OUTBOX_REQUIRE_ALL=1`. Keep the
   * suite's hooks inside the body, so that nothing of it runs without what it needs.
   */
  describe(name: string, body: () => void): void
  /** An `it` that runs only when the requirement is met; missing, it is skipped (or fails) as {@link describe} says. */
  it(name: string, body: TestFunction, timeoutMs?: number): void
}

/**
 * The one allowed way for a test to not run: it needs something a contributor's machine may lack. A missing
 * requirement skips with one line in the run's summary (printed by the requirement reporter), and fails instead
 * when `OUTBOX_REQUIRE_ALL=1`, so CI never passes with a suite that did not run. `suite` names what is skipped, as
 * the summary line shows it.
 *
 * @example
 * ```ts
 * const browser = requires('console browser suite', findChromium())
 * browser.describe('the console in a browser', () => {
 *   beforeAll(async () => {
 *     await chromium.launch({ executablePath: browser.value })
 *   })
 * })
 * ```
 */
export function requires<T>(suite: string, availability: Availability<T>): Requirement<T> {
  const note = availability.available ? '' : `${REQUIREMENT_NOTE_PREFIX}${suite} — ${availability.missing}`
  const stand: TestFunction = (context) => {
    if (process.env[REQUIRE_ALL_VARIABLE] === '1')
      throw new Error(`${note.slice(REQUIREMENT_NOTE_PREFIX.length)} (required: ${REQUIRE_ALL_VARIABLE}=1)`)
    context.skip(note)
  }
  const title = (name: string) => `${name} (needs ${suite})`
  return {
    get value(): T {
      if (!availability.available) throw new Error(`${suite} needs what is missing: ${availability.missing}`)
      return availability.value
    },
    available: availability.available,
    describe(name, body) {
      if (availability.available) describe(name, body)
      else describe(name, () => it(title('every test'), stand))
    },
    it(name, body, timeoutMs) {
      if (availability.available) it(name, body, timeoutMs)
      else it(title(name), stand)
    },
  }
}
