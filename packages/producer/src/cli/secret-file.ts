import { readFileSync } from 'node:fs'
import { UsageError } from './cli-error.js'

/**
 * Reads a secret from a file (a mounted Kubernetes Secret, a systemd credential, a Docker secret): its text without
 * the trailing newline editors and `echo` add. The file's content is never echoed, only its path and what is wrong.
 */
export function readSecretFile(path: string, source: string): string {
  let text: string
  try {
    text = readFileSync(path, 'utf8')
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code
    const why =
      code === 'ENOENT'
        ? 'no such file'
        : code === 'EACCES'
          ? 'permission denied'
          : code === 'EISDIR'
            ? 'it is a directory'
            : String(code)
    throw new UsageError(`cannot read ${source} ${path}: ${why}`, { cause: error })
  }
  const value = text.trim()
  if (value === '') throw new UsageError(`${source} ${path} is empty`)
  return value
}
