import { userInfo } from 'node:os'

/**
 * The actor a CLI action is recorded under in the audit log: `--actor` when given, else the OS user running the
 * command (who typed it, as far as the machine knows), else `'cli'` (a container user with no passwd entry makes
 * `userInfo` throw). The library checks the name.
 */
export function cliActor(flag: string | undefined): string {
  if (flag !== undefined) return flag
  try {
    const { username } = userInfo()
    return username.trim() === '' ? 'cli' : username
  } catch {
    return 'cli'
  }
}
