import { constants } from 'node:os'

/** The first SIGINT/SIGTERM as an AbortSignal; see {@link catchInterrupt}. */
export interface Interrupt {
  /** Aborted by the first SIGINT or SIGTERM. */
  readonly signal: AbortSignal
  /** Which signal arrived, if one did. */
  readonly received: NodeJS.Signals | undefined
  /** Resolves at the first signal. */
  readonly wait: Promise<NodeJS.Signals>
  /** Puts the default signal behaviour back. */
  dispose(): void
}

/** The shell's convention for "ended by signal N". */
export function signalExitCode(signal: NodeJS.Signals): number {
  return 128 + (constants.signals[signal] ?? 1)
}

/**
 * Turns the first SIGINT/SIGTERM into a graceful stop. A second signal means the operator will not wait: it calls
 * `onRepeat`, which by default exits at once with 128 + the signal number.
 */
export function catchInterrupt(
  onRepeat: (signal: NodeJS.Signals) => void = (signal) => process.exit(signalExitCode(signal)),
): Interrupt {
  const controller = new AbortController()
  let received: NodeJS.Signals | undefined
  let resolveWait: (signal: NodeJS.Signals) => void = () => {}
  const wait = new Promise<NodeJS.Signals>((resolve) => {
    resolveWait = resolve
  })
  const handler = (signal: NodeJS.Signals) => {
    if (received !== undefined) {
      onRepeat(signal)
      return
    }
    received = signal
    controller.abort(signal)
    resolveWait(signal)
  }
  process.on('SIGINT', handler)
  process.on('SIGTERM', handler)
  return {
    signal: controller.signal,
    get received() {
      return received
    },
    wait,
    dispose() {
      process.off('SIGINT', handler)
      process.off('SIGTERM', handler)
    },
  }
}
