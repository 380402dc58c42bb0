import { createLargeBodyPace, type LargeBodyPace } from './large-body-pace.js'

/**
 * The bound on bodies read at once and the count of the bytes they hold, shared by every adapter of one consumer.
 * A slot is taken before a streamed body's first byte is read and given back when its read ends; `count` follows
 * the bytes the reads keep (see `readBody`'s `onBytes`), so `peakBytes` is what slow or many bodies ever held in
 * the consumer at once — at most `maxBodyBytes` × `maxConcurrent`.
 */
export interface BodyGate {
  /** The pace of the bytes past each body's first 64 KiB (`largeBodyBytesPerSecond`). */
  readonly pace: LargeBodyPace
  /** Takes a slot; false when `maxConcurrent` bodies are being read already (the request is then refused). */
  enter(): boolean
  /** Gives the slot back. */
  leave(): void
  /** Adds (or, negative, removes) bytes held by reads in progress. */
  count(delta: number): void
  /** Bodies being read now. */
  readonly reading: number
  /** Bytes those reads hold now. */
  readonly bytes: number
  /** The most bytes reads held at once since the consumer was created. */
  readonly peakBytes: number
}

/** Creates the {@link BodyGate} of one consumer. */
export function createBodyGate(maxConcurrent: number, largeBodyBytesPerSecond: number): BodyGate {
  // A burst of a quarter second's worth: one large real body now and then reads at once.
  const pace = createLargeBodyPace(largeBodyBytesPerSecond, largeBodyBytesPerSecond / 4)
  let reading = 0
  let bytes = 0
  let peakBytes = 0
  return {
    pace,
    enter() {
      if (reading >= maxConcurrent) return false
      reading++
      return true
    },
    leave() {
      reading--
    },
    count(delta) {
      bytes += delta
      if (bytes > peakBytes) peakBytes = bytes
    },
    get reading() {
      return reading
    },
    get bytes() {
      return bytes
    },
    get peakBytes() {
      return peakBytes
    },
  }
}
