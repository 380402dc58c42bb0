// A tracked webhook sink in its own OS process, for cases where a busy subscriber's requests must not share the
// measuring process's event loop. Started with its options as JSON in argv[2]; sends `{ url }` over IPC once
// listening, answers "report" with its order report, closes on "stop" or when the parent goes away.
import { startTrackedSink } from './support/sink.js'
import type { SinkProcessOptions } from './support/sink-process.js'

const options = JSON.parse(process.argv[2] ?? '{}') as SinkProcessOptions
const sink = await startTrackedSink({ expected: options.expected, delayMs: options.delayMs })

let stopping: Promise<void> | undefined
function stop(): Promise<void> {
  stopping ??= (async () => {
    await sink.close()
    process.exit(0)
  })()
  return stopping
}
process.on('message', (message) => {
  if (message === 'report') process.send?.({ report: sink.tracker.report(true) })
  if (message === 'stop') void stop()
})
process.once('disconnect', () => void stop())
process.send?.({ url: sink.url })
