// A relay in its own OS process, for the multi-process throughput case and the backlog-fairness case. Started with
// its options as JSON in argv[2]; says "armed" over IPC once connected, starts on "go" and says "started" once
// running (LISTEN connected), stops gracefully on "stop" or when the parent goes away (so it never outlives the
// benchmark).
import { monitorEventLoopDelay } from 'node:perf_hooks'
import { Relay, silentLogger } from '@outbox/producer'
import { openKysely } from '@outbox/test-harness'
import type { RelayProcessOptions } from './support/outbox.js'

const { url, listen, ...options } = JSON.parse(process.argv[2] ?? '{}') as RelayProcessOptions
const db = openKysely(url, { max: 10 })
const relay = new Relay({
  ...options,
  db,
  logger: silentLogger,
  ...(listen ? { listen: { connectionString: url } } : {}),
})
await db.selectNoFrom((eb) => eb.val(1).as('one')).execute()

let stopping: Promise<void> | undefined
function stop(): Promise<void> {
  stopping ??= (async () => {
    await relay.stop({ timeoutMs: 5000 })
    await db.destroy()
    process.exit(0)
  })()
  return stopping
}
// The relay's own event-loop delay while it runs: how busy its one thread was, asked for with "loop".
const loop = monitorEventLoopDelay({ resolution: 10 })
process.on('message', (message) => {
  if (message === 'go') {
    loop.enable()
    void relay.start().then(() => process.send?.('started'))
  }
  if (message === 'loop') process.send?.({ loopDelayP99: loop.percentile(99) / 1e6 })
  if (message === 'stop') void stop()
})
process.once('disconnect', () => void stop())
process.send?.('armed')
