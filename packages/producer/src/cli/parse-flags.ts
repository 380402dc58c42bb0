import { type ParseArgsConfig, parseArgs } from 'node:util'
import { parseDuration } from '@outbox/protocol'
import { UsageError } from './cli-error.js'

type OptionsConfig = NonNullable<ParseArgsConfig['options']>

/** The options every command that touches the database accepts. */
export const DATABASE_FLAGS = {
  'database-url': { type: 'string' },
  schema: { type: 'string' },
  help: { type: 'boolean', short: 'h' },
} as const satisfies OptionsConfig

/**
 * `parseArgs` in strict mode, with its errors turned into one short {@link UsageError} that names the command, so
 * `outbox stats --jsno` says what is wrong and where to look instead of throwing a TypeError.
 */
export function parseFlags<const O extends OptionsConfig>(
  command: string,
  argv: readonly string[],
  options: O,
  allowPositionals = false,
): ReturnType<typeof parseArgs<{ args: string[]; options: O; strict: true; allowPositionals: boolean }>> {
  try {
    return parseArgs({ args: [...argv], options, strict: true, allowPositionals })
  } catch (error) {
    throw new UsageError(`${explainParseError(error)} (see outbox ${command} --help)`, { cause: error })
  }
}

function explainParseError(error: unknown): string {
  const { code, message } = error as { code?: string; message?: string }
  const text = String(message ?? error)
  const quoted = /'([^']+)'/.exec(text)?.[1]
  if (code === 'ERR_PARSE_ARGS_UNKNOWN_OPTION' && quoted) return `unknown option ${quoted}`
  if (code === 'ERR_PARSE_ARGS_UNEXPECTED_POSITIONAL' && quoted) return `unexpected argument "${quoted}"`
  if (code === 'ERR_PARSE_ARGS_INVALID_OPTION_VALUE' && quoted) {
    const name = quoted.split(' ')[0]
    if (text.includes('does not take an argument')) return `${name} takes no value`
    if (text.includes('ambiguous'))
      return `${name} needs a value (to pass one starting with "-", write ${name}=<value>)`
    return `${name} needs a value`
  }
  // Any other parser complaint: its first sentence is already one readable line.
  return text.split('. ')[0] ?? text
}

/**
 * Reads an integer flag of the CLI's own (or one it caps below the library's bound): digits only (no `1e3`, no `12abc`, which `Number`/`parseInt` would let through), within
 * [min, max]. Undefined when the flag is absent, so the library's default applies.
 */
export function integerFlag(
  value: string | undefined,
  flag: string,
  min: number,
  max = Number.MAX_SAFE_INTEGER,
): number | undefined {
  if (value === undefined) return undefined
  const parsed = /^\d+$/.test(value.trim()) ? Number(value.trim()) : Number.NaN
  if (!Number.isSafeInteger(parsed) || parsed < min || parsed > max) {
    const range = max === Number.MAX_SAFE_INTEGER ? `an integer ≥ ${min}` : `an integer from ${min} to ${max}`
    throw new UsageError(`--${flag} must be ${range}, got ${JSON.stringify(value)}`)
  }
  return parsed
}

/**
 * Reads a number flag for a library option: the text as a number when it is written as one (digits, an optional
 * sign and decimals; no `1e3` or `12abc`, which `Number`/`parseInt` would let through), else `NaN`. Bounds are
 * not checked here: the library checks them and its error names the option, which the CLI maps to the flag
 * ({@link withFlagNames}). Undefined when the flag is absent, so the library's default applies.
 */
export function numberFlag(value: string | undefined): number | undefined {
  if (value === undefined) return undefined
  const text = value.trim()
  return /^-?\d+(\.\d+)?$/.test(text) ? Number(text) : Number.NaN
}

/**
 * Reads a duration flag (`30d`, `12h`, `90s`, `500ms` or plain milliseconds) into milliseconds, with the
 * protocol's one parser, so the CLI accepts exactly what the API does.
 */
export function durationFlag(
  value: string | undefined,
  flag: string,
  bounds: { readonly minMs?: number; readonly maxMs?: number } = {},
): number | undefined {
  if (value === undefined) return undefined
  const text = value.trim()
  let ms: number
  try {
    ms = parseDuration(/^\d+$/.test(text) ? Number(text) : text, `--${flag}`)
  } catch (error) {
    throw new UsageError(
      `--${flag} must be a duration like 30d, 12h, 15m, 90s or 500ms (or milliseconds), got ${JSON.stringify(value)}`,
      { cause: error },
    )
  }
  // Bounds of the CLI's own flags only: a library option's bounds are the library's to check (withFlagNames).
  const { minMs = 0, maxMs = Number.POSITIVE_INFINITY } = bounds
  if (ms < minMs || ms > maxMs) {
    const range = maxMs === Number.POSITIVE_INFINITY ? `at least ${minMs}ms` : `from ${minMs}ms to ${maxMs}ms`
    throw new UsageError(`--${flag} must be a duration ${range}, got ${JSON.stringify(value)}`)
  }
  return ms
}

/**
 * `--disabled-retention`: a duration, or `off` (the library's `false`, as when the flag is not given: a disabled
 * subscription keeps its deliveries until it is enabled or deleted); undefined when not given.
 */
export function disabledRetentionFlag(value: string | undefined): number | false | undefined {
  return value?.trim() === 'off' ? false : durationFlag(value, 'disabled-retention')
}

/** Picks one value of an enumerated flag, or says which values exist. */
export function choiceFlag<const C extends string>(
  value: string | undefined,
  flag: string,
  choices: readonly C[],
): C | undefined {
  if (value === undefined) return undefined
  if ((choices as readonly string[]).includes(value)) return value as C
  throw new UsageError(`--${flag} must be one of ${choices.join(', ')}; got ${JSON.stringify(value)}`)
}
