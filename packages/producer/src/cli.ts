#!/usr/bin/env node
import { readFileSync } from 'node:fs'
import { runCli } from './cli/run-cli.js'

/** The package's version, read from the package.json beside `dist/` so it always matches what is installed. */
function readVersion(): string {
  try {
    const manifest = JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8'))
    return String(manifest.version)
  } catch {
    return 'unknown'
  }
}

// Last-resort nets: whatever escapes still ends as one line, never a stack trace.
process.on('uncaughtException', (error) => {
  process.stderr.write(`outbox: unexpected error: ${error?.message ?? String(error)}\n`)
  process.exit(1)
})
process.on('unhandledRejection', (reason) => {
  process.stderr.write(
    `outbox: unexpected error: ${reason instanceof Error ? reason.message : String(reason)}\n`,
  )
  process.exit(1)
})
// `outbox dead-letters list | head` closes the pipe early: that is the reader's choice, not a failure.
process.stdout.on('error', (error: NodeJS.ErrnoException) => {
  if (error.code === 'EPIPE') process.exit(0)
  throw error
})

const exitCode = await runCli(process.argv.slice(2), process, readVersion())
process.exitCode = exitCode
// Everything the CLI opens is closed by now; this only guards against a stray handle keeping a finished command
// alive (unref'd, so it never delays a normal exit).
setTimeout(() => process.exit(exitCode), 2000).unref()
