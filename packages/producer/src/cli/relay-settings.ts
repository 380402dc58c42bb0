import { readFileSync } from 'node:fs'
import { UsageError } from './cli-error.js'

/** A flag as `parseArgs` declares it. */
export interface FlagSpec {
  readonly type: 'string' | 'boolean'
  readonly multiple?: boolean
}

/** What {@link resolveSettings} returns: the flags' values and the environment the rest of the command reads. */
export interface Settings {
  /** Every flag's value, from the command line, else the environment, else the config file. */
  readonly values: Record<string, string | boolean | string[] | undefined>
  /**
   * The environment with the config file's values added under their variables where the environment had none: the
   * code that reads `DATABASE_URL`, `OUTBOX_SCHEMA` or `OUTBOX_SECRET` itself sees the file's values at the right
   * precedence.
   */
  readonly env: NodeJS.ProcessEnv
}

/** Variables whose names predate the `OUTBOX_<FLAG>` rule (a database URL is `DATABASE_URL` everywhere). */
const ENV_NAMES: Readonly<Record<string, string>> = {
  'database-url': 'DATABASE_URL',
  'database-url-file': 'DATABASE_URL_FILE',
}

/** Flags whose variable the command's shared code reads itself (with its own checks and old names). */
const READ_ELSEWHERE = new Set(['database-url', 'schema', 'secret'])

/** Flags no environment or file sets: help is asked for on the command line, and the file cannot name a file. */
const COMMAND_LINE_ONLY = new Set(['help', 'config'])

/**
 * The environment variable of a flag: `OUTBOX_` and the flag in upper snake case (`--poll-interval` →
 * `OUTBOX_POLL_INTERVAL`), but for the database URL's, which is `DATABASE_URL` (and `DATABASE_URL_FILE`) everywhere.
 *
 * @example
 * ```ts
 * envNameOf('batch-size') // 'OUTBOX_BATCH_SIZE'
 * ```
 */
export function envNameOf(flag: string): string {
  return ENV_NAMES[flag] ?? `OUTBOX_${flag.toUpperCase().replaceAll('-', '_')}`
}

/** A flag's key in a config file: its name in camel case (`--poll-interval` → `pollInterval`). */
export function configKeyOf(flag: string): string {
  return flag.replace(/-([a-z])/g, (_, letter: string) => letter.toUpperCase())
}

function booleanFrom(text: string, where: string): boolean {
  const value = text.trim().toLowerCase()
  if (['1', 'true', 'yes', 'on'].includes(value)) return true
  if (['0', 'false', 'no', 'off', ''].includes(value)) return false
  throw new UsageError(`${where} must be true or false, got ${JSON.stringify(text)}`)
}

/** Reads a `--config` file: one JSON object whose keys are flags in camel case. */
function readConfig(
  path: string,
  source: string,
  flags: Readonly<Record<string, FlagSpec>>,
): Map<string, string | boolean | string[]> {
  let text: string
  try {
    text = readFileSync(path, 'utf8')
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code
    const why = code === 'ENOENT' ? 'no such file' : code === 'EACCES' ? 'permission denied' : String(code)
    throw new UsageError(`cannot read ${source} ${path}: ${why}`, { cause: error })
  }
  let parsed: unknown
  try {
    parsed = JSON.parse(text)
  } catch (error) {
    throw new UsageError(`${source} ${path} is not valid JSON: ${(error as Error).message}`, { cause: error })
  }
  if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed)) {
    throw new UsageError(
      `${source} ${path} must hold one JSON object, e.g. {"concurrency": 32, "lease": "30s"}`,
    )
  }
  const byKey = new Map(
    Object.keys(flags)
      .filter((flag) => !COMMAND_LINE_ONLY.has(flag))
      .map((flag) => [configKeyOf(flag), flag]),
  )
  const settings = new Map<string, string | boolean | string[]>()
  for (const [key, value] of Object.entries(parsed)) {
    const flag = byKey.get(key)
    if (flag === undefined) {
      throw new UsageError(
        `unknown key ${JSON.stringify(key)} in ${path}; the keys are the flags in camel case: ${[...byKey.keys()].join(', ')}`,
      )
    }
    const spec = flags[flag]!
    const where = `${key} in ${path}`
    if (spec.type === 'boolean') {
      if (typeof value !== 'boolean') throw new UsageError(`${where} must be true or false`)
      settings.set(flag, value)
    } else if (spec.multiple && Array.isArray(value)) {
      if (!value.every((one) => typeof one === 'string'))
        throw new UsageError(`${where} must be a string or a list of strings`)
      settings.set(flag, value as string[])
    } else if (typeof value === 'string' || typeof value === 'number') {
      settings.set(flag, String(value))
    } else {
      throw new UsageError(
        `${where} must be a ${spec.multiple ? 'string or a list of strings' : 'string or number'}`,
      )
    }
  }
  return settings
}

/**
 * Every flag of a command also from the environment (`OUTBOX_<FLAG>`, see {@link envNameOf}) and from a JSON
 * config file (`--config <file>` or `OUTBOX_CONFIG`), with one precedence: **the command line wins over the
 * environment, which wins over the file**. A key the file should not have is refused by name, so a typo is never
 * silently ignored.
 */
export function resolveSettings(
  flags: Readonly<Record<string, FlagSpec>>,
  parsed: Readonly<Record<string, string | boolean | string[] | undefined>>,
  env: NodeJS.ProcessEnv,
): Settings {
  const values: Record<string, string | boolean | string[] | undefined> = { ...parsed }
  const merged: NodeJS.ProcessEnv = { ...env }
  const configPath = (parsed.config as string | undefined)?.trim() || env.OUTBOX_CONFIG?.trim() || undefined
  const file = configPath
    ? readConfig(configPath, parsed.config ? '--config' : 'OUTBOX_CONFIG', flags)
    : new Map()
  for (const [flag, spec] of Object.entries(flags)) {
    if (COMMAND_LINE_ONLY.has(flag)) continue
    const name = envNameOf(flag)
    const fromFile = file.get(flag)
    if (fromFile !== undefined && !merged[name]?.trim()) {
      merged[name] = Array.isArray(fromFile) ? fromFile.join(',') : String(fromFile)
    }
    if (READ_ELSEWHERE.has(flag) || values[flag] !== undefined) continue
    // A value from the file keeps its type (a list stays a list); one from the environment is text.
    const text = merged[name]
    if (text === undefined || text.trim() === '') continue
    if (spec.type === 'boolean') {
      values[flag] = typeof fromFile === 'boolean' && !env[name]?.trim() ? fromFile : booleanFrom(text, name)
    } else if (spec.multiple) {
      values[flag] = Array.isArray(fromFile) && !env[name]?.trim() ? fromFile : [text]
    } else values[flag] = text
  }
  return { values, env: merged }
}
