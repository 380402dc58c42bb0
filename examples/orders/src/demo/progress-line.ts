/**
 * Live progress: on a terminal, one line redrawn in place; otherwise (CI, a pipe, a file) one line every few
 * seconds, so logs stay readable. `log` prints a message above the progress line without garbling it.
 */
export class ProgressLine {
  readonly #stream: NodeJS.WriteStream
  readonly #tty: boolean
  #render: () => string = () => ''
  #timer: NodeJS.Timeout | undefined
  #shown = false

  constructor(
    stream: NodeJS.WriteStream,
    private readonly ttyIntervalMs = 150,
    private readonly lineIntervalMs = 2_000,
  ) {
    this.#stream = stream
    this.#tty = stream.isTTY === true
  }

  /**
   * Starts drawing what `render` returns: every `ttyIntervalMs` on a terminal, every `lineIntervalMs`
   * otherwise.
   */
  start(render: () => string): void {
    if (this.#timer) return
    this.#render = render
    this.#timer = setInterval(() => this.#draw(), this.#tty ? this.ttyIntervalMs : this.lineIntervalMs)
  }

  /** Prints a line above the progress line. */
  log(line: string): void {
    if (this.#tty && this.#shown) this.#stream.write('\r\x1b[2K')
    this.#stream.write(`${line}\n`)
    if (this.#tty && this.#shown) this.#draw()
  }

  /** Draws the line one last time and leaves it on screen. */
  stop(): void {
    if (!this.#timer) return
    clearInterval(this.#timer)
    this.#timer = undefined
    this.#draw()
    if (this.#tty) this.#stream.write('\n')
    this.#shown = false
  }

  #draw(): void {
    const line = this.#render()
    if (this.#tty) {
      const width = this.#stream.columns || 120
      this.#stream.write(`\r\x1b[2K${line.length > width - 1 ? `${line.slice(0, width - 2)}…` : line}`)
      this.#shown = true
    } else {
      this.#stream.write(`${line}\n`)
    }
  }
}
