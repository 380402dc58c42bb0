import type { ReencryptSecretsResult } from '../index.js'
import { UsageError } from './cli-error.js'
import { type CliIo, writeLine } from './command.js'
import { loadProducer } from './load-producer.js'
import { resolveDatabase, withDatabase } from './open-database.js'
import { withFlagNames } from './option-flags.js'
import { DATABASE_FLAGS, integerFlag, parseFlags } from './parse-flags.js'
import { secretKeysFromEnv } from './secret-keys-env.js'

/** The counts of a re-encryption in one line. */
function counts(result: ReencryptSecretsResult): string {
  return `${result.examined} secrets: ${result.encrypted} encrypted (were plaintext), ${result.reencrypted} re-encrypted under the first key, ${result.unchanged} already under it`
}

/** `outbox secrets reencrypt`: puts every stored subscription secret under the first of OUTBOX_SECRET_KEYS. */
export async function secretsCommand(argv: readonly string[], io: CliIo): Promise<number> {
  const [action, ...rest] = argv
  if (action !== 'reencrypt') {
    throw new UsageError(
      action === undefined
        ? 'missing subcommand: outbox secrets reencrypt (see outbox secrets --help)'
        : `unknown subcommand ${JSON.stringify(action)}: use outbox secrets reencrypt (see outbox secrets --help)`,
    )
  }
  const { values } = parseFlags('secrets reencrypt', rest, {
    ...DATABASE_FLAGS,
    'batch-size': { type: 'string' },
    json: { type: 'boolean' },
  })
  const batchSize = integerFlag(values['batch-size'], 'batch-size', 1, 10_000)
  const secretKeys = secretKeysFromEnv(io.env)
  if (secretKeys === undefined) {
    throw new UsageError(
      'set OUTBOX_SECRET_KEYS (or OUTBOX_SECRET_KEYS_FILE): the keys as id:base64, comma-separated, the one to encrypt with first (see outbox secrets --help)',
    )
  }
  const target = resolveDatabase(values, io.env)
  const { reencryptSecrets } = await loadProducer()
  const result = await withFlagNames(values, () =>
    withDatabase(target, { applicationName: 'outbox secrets', max: 1 }, (db) =>
      reencryptSecrets(db, {
        secretKeys,
        batchSize,
        schema: target.schema,
        onBatch: (progress) => writeLine(io.stderr, `secrets reencrypt: ${counts(progress)} so far`),
      }),
    ),
  )
  if (values.json) writeLine(io.stdout, JSON.stringify(result))
  else writeLine(io.stdout, `${counts(result)}; done`)
  return 0
}
