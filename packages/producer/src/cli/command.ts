/** Where a command writes and what it reads from its environment; the real process in production. */
export interface CliIo {
  /** Results: tables, JSON documents, relay log lines. */
  readonly stdout: NodeJS.WriteStream
  /** Progress and the one-line error of a failure. */
  readonly stderr: NodeJS.WriteStream
  readonly env: NodeJS.ProcessEnv
}

/** One `outbox` command: runs with the arguments after its name and resolves to the exit code. */
export type CommandRun = (argv: readonly string[], io: CliIo) => Promise<number>

/** Writes one line (a newline is added). */
export function writeLine(stream: NodeJS.WritableStream, line = ''): void {
  stream.write(`${line}\n`)
}
