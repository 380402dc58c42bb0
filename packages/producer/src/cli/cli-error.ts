import { EXIT_FAILURE, EXIT_USAGE } from './cli-defaults.js'

/**
 * A failure the CLI reports as one line on stderr and an exit code, never as a stack trace. Thrown by commands
 * for conditions they have already explained in words an operator can act on.
 */
export class CliError extends Error {
  override readonly name: string = 'CliError'
  /** The process exit code: 1 for runtime failures (database, network), 2 for usage errors. */
  readonly exitCode: number

  constructor(message: string, exitCode = EXIT_FAILURE, options?: { cause?: unknown }) {
    super(message, options)
    this.exitCode = exitCode
  }
}

/** A mistake in how the command was called (missing option, unknown flag, bad value): exit code 2. */
export class UsageError extends CliError {
  override readonly name = 'UsageError'

  constructor(message: string, options?: { cause?: unknown }) {
    super(message, EXIT_USAGE, options)
  }
}
