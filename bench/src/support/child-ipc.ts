import type { ChildProcess } from 'node:child_process'
import { withTimeout } from './timing.js'

/**
 * Sends `message` to a child process and resolves with the first answer `pick` accepts (it returns undefined for
 * messages that are not the answer); fails after `ms`, naming `what`.
 */
export function askChild<T>(
  child: ChildProcess,
  message: string,
  pick: (answer: any) => T | undefined,
  what: string,
  ms = 10_000,
): Promise<T> {
  const answer = new Promise<T>((resolve) => {
    const onMessage = (received: unknown) => {
      const picked = pick(received)
      if (picked === undefined) return
      child.off('message', onMessage)
      resolve(picked)
    }
    child.on('message', onMessage)
  })
  child.send(message)
  return withTimeout(answer, ms, what)
}
