import { accessSync, constants } from 'node:fs'
import type { Availability } from './requirement.js'

/**
 * Where Chromium or Chrome is usually installed: Debian and Ubuntu packages, Google's packages, the snap, and the
 * macOS app bundles. A browser is never downloaded for the tests.
 */
export const CHROMIUM_PATHS: readonly string[] = Object.freeze([
  '/usr/bin/chromium',
  '/usr/bin/chromium-browser',
  '/usr/bin/google-chrome',
  '/usr/bin/google-chrome-stable',
  '/snap/bin/chromium',
  '/Applications/Chromium.app/Contents/MacOS/Chromium',
  '/Applications/Google Chrome.app/Contents/MacOS/Google Chrome',
])

function executable(path: string): boolean {
  try {
    accessSync(path, constants.X_OK)
    return true
  } catch {
    return false
  }
}

/**
 * The Chromium to drive: `CHROMIUM_PATH` when set (and then only it — a wrong path is reported, not silently
 * replaced by another browser), else the first executable of {@link CHROMIUM_PATHS}.
 *
 * @example
 * ```ts
 * const browser = requires('console browser suite', findChromium())
 * ```
 */
export function findChromium(
  env: NodeJS.ProcessEnv = process.env,
  paths: readonly string[] = CHROMIUM_PATHS,
): Availability<string> {
  const chosen = env.CHROMIUM_PATH
  if (chosen)
    return executable(chosen)
      ? { available: true, value: chosen }
      : { available: false, missing: `CHROMIUM_PATH=${chosen} is not an executable file` }
  const found = paths.find(executable)
  return found
    ? { available: true, value: found }
    : { available: false, missing: 'no Chromium found (set CHROMIUM_PATH)' }
}
