import { EXIT_USAGE } from './cli-defaults.js'
import { UsageError } from './cli-error.js'
import { type CliIo, type CommandRun, writeLine } from './command.js'
import { describeError } from './describe-error.js'
import { HELP, type HelpTopic, programHelp, SUMMARIES, wantsHelp } from './help-text.js'
import { maskCredentials } from './mask-credentials.js'

/**
 * Each command's module, loaded only when that command runs: help, `--version` and a mistyped command answer
 * without loading the database driver and the HTTP client.
 */
const COMMANDS: Readonly<Record<string, () => Promise<CommandRun>>> = {
  migrate: async () => (await import('./migrate-command.js')).migrateCommand,
  relay: async () => (await import('./relay-command.js')).relayCommand,
  stats: async () => (await import('./stats-command.js')).statsCommand,
  prune: async () => (await import('./prune-command.js')).pruneCommand,
  'dead-letters': async () => (await import('./dead-letters-command.js')).deadLettersCommand,
  deliveries: async () => (await import('./deliveries-command.js')).deliveriesCommand,
  doctor: async () => (await import('./doctor-command.js')).doctorCommand,
  subscriptions: async () => (await import('./subscriptions-command.js')).subscriptionsCommand,
  lanes: async () => (await import('./lanes-command.js')).lanesCommand,
  audit: async () => (await import('./audit-command.js')).auditCommand,
  secrets: async () => (await import('./secrets-command.js')).secretsCommand,
}

const NAMES = SUMMARIES.map(([name]) => name).join(', ')

/** The help page `outbox <argv> --help` asks for: a subcommand's when one is named, else the command's. */
function helpTopic(name: string, rest: readonly string[]): HelpTopic | undefined {
  const sub = `${name} ${rest[0]}`
  if (sub in HELP) return sub as HelpTopic
  return name in HELP ? (name as HelpTopic) : undefined
}

/**
 * Runs `outbox` with the arguments after the program name and resolves to the exit code. Never throws: every
 * failure becomes one line on stderr (set OUTBOX_DEBUG=1 to also print the stack).
 */
export async function runCli(argv: readonly string[], io: CliIo, version: string): Promise<number> {
  try {
    const [name, ...rest] = argv
    if (name === undefined) {
      io.stderr.write(programHelp())
      return EXIT_USAGE
    }
    if (name === '--help' || name === '-h' || name === 'help') {
      const topic = rest.length > 0 ? helpTopic(rest[0]!, rest.slice(1)) : undefined
      io.stdout.write(topic ? HELP[topic] : programHelp())
      return 0
    }
    if (name === '--version' || name === '-v' || name === 'version') {
      writeLine(io.stdout, version)
      return 0
    }
    const load = Object.hasOwn(COMMANDS, name) ? COMMANDS[name] : undefined
    if (!load) {
      if (name.startsWith('-')) {
        throw new UsageError(`options go after the command, e.g. outbox stats ${name}; commands: ${NAMES}`)
      }
      throw new UsageError(`unknown command ${JSON.stringify(name)}; commands: ${NAMES} (see outbox --help)`)
    }
    if (wantsHelp(rest)) {
      io.stdout.write(HELP[helpTopic(name, rest)!])
      return 0
    }
    return await (await load())(rest, io)
  } catch (error) {
    const report = describeError(error)
    // Whatever layer wrote the message, a URL in it shows no password.
    writeLine(io.stderr, `outbox: ${maskCredentials(report.message)}`)
    if (io.env.OUTBOX_DEBUG && error instanceof Error && error.stack)
      writeLine(io.stderr, maskCredentials(error.stack))
    return report.exitCode
  }
}
