/**
 * Paces what request bodies cost past their first bytes, all of one consumer's requests together: the bytes of a
 * body past its first {@link FREE_BODY_BYTES} are read at most `bytesPerSecond`, in the order they arrive. A body
 * told to wait is left unread meanwhile (a Node stream is paused, a web stream not pulled), so its sender is held
 * back by TCP and costs nothing.
 *
 * Why: a request with well-formed signature headers can only be refused once its whole body is read and hashed.
 * A client without the secret sending large bodies in a loop would otherwise have them read as fast as it sends —
 * the event loop busy with its bytes, every real delivery's round trips waiting behind them, its pooled connection
 * held the while, until the consumer could no longer keep up. Real deliveries are small (one chunk, a few hundred
 * bytes) and never wait here; a flood of large forged bodies gets the rate, and no more of the consumer's time.
 *
 * A virtual schedule (GCRA), not a bucket refilled by a timer: each chunk is given its turn after the bytes
 * scheduled before it, with `burstBytes` allowed at once after a quiet spell.
 */
export interface LargeBodyPace {
  /** Milliseconds the read must wait before going on past these bytes (0: at once). */
  wait(bytes: number): number
}

/** Bytes of each body read without pacing: a real delivery's whole body, even a large one's first chunks. */
export const FREE_BODY_BYTES = 65_536

/** Creates the pace of one consumer: `bytesPerSecond` after a burst of `burstBytes`. */
export function createLargeBodyPace(
  bytesPerSecond: number,
  burstBytes: number,
  now: () => number = () => performance.now(),
): LargeBodyPace {
  const msPerByte = 1000 / bytesPerSecond
  const burstMs = burstBytes * msPerByte
  // When the bytes scheduled so far will have been read at the rate: the next chunk's turn comes after them.
  let busyUntil = Number.NEGATIVE_INFINITY
  return {
    wait(bytes) {
      const at = now()
      // After a quiet spell the schedule restarts now: what went unused is not saved up beyond the burst.
      busyUntil = Math.max(busyUntil, at) + bytes * msPerByte
      // Up to burstMs of schedule ahead of now reads at once; past it, the read waits for its turn.
      return Math.max(0, busyUntil - burstMs - at)
    },
  }
}
