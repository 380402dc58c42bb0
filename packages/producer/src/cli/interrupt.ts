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
 * How long after the first signal the same signal again is the same request, not a second one. One Ctrl-C can
 * arrive twice: the terminal sends it to the whole foreground process group, and `npx` (npm run-script) forwards
 * what it gets to its child too — where npm's shell is bash, the relay under `npx outbox relay` gets SIGINT twice
 * within milliseconds, and treating that as "exit at once" left its lanes leased until their leases ran out.
 */
export const REPEAT_GRACE_MS = 1000

/**
 * Turns the first SIGINT/SIGTERM into a graceful stop. A second signal means the operator will not wait: it calls
 * `onRepeat`, which by default exits at once with 128 + the signal number — unless it is the same signal within
 * {@link REPEAT_GRACE_MS} of the first (one keypress delivered twice), which is ignored.
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
  let receivedAt = 0
  const handler = (signal: NodeJS.Signals) => {
    if (received !== undefined) {
      if (signal === received && performance.now() - receivedAt < REPEAT_GRACE_MS) return
      onRepeat(signal)
      return
    }
    received = signal
    receivedAt = performance.now()
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
