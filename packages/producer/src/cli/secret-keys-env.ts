import { UsageError } from './cli-error.js'
import { readSecretFile } from './secret-file.js'

/**
 * The keys that encrypt subscription secrets at rest, as the commands take them: `OUTBOX_SECRET_KEYS`, or
 * `OUTBOX_SECRET_KEYS_FILE` naming a file that holds them (one key per line, or comma-separated: a key rotation
 * adds a line at the top). Never a flag: `ps` shows every process's arguments to every user of the machine.
 * Undefined when neither is set; the library checks the keys and reports under `OUTBOX_SECRET_KEYS`.
 */
export function secretKeysFromEnv(env: NodeJS.ProcessEnv): string | undefined {
  const inline = env.OUTBOX_SECRET_KEYS?.trim()
  const file = env.OUTBOX_SECRET_KEYS_FILE?.trim()
  if (inline && file) {
    throw new UsageError('give the secret keys once: OUTBOX_SECRET_KEYS or OUTBOX_SECRET_KEYS_FILE, not both')
  }
  if (file) {
    return readSecretFile(file, 'OUTBOX_SECRET_KEYS_FILE')
      .split(/[\r\n,]+/)
      .map((line) => line.trim())
      .filter(Boolean)
      .join(',')
  }
  return inline || undefined
}
