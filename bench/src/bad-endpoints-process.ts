// Misbehaving endpoints (see support/bad-endpoints.ts) in their own OS process, as another customer's hosts are:
// an endpoint pouring an endless body costs its own CPU, not the measuring process's. Started with `{ count,
// badness }` as JSON in argv[2]; sends `{ urls }` over IPC once listening; on "stop" closes them and answers
// `{ requests, bytesSent }`, then exits (also when the parent goes away).
import { type Badness, startBadEndpoints } from './support/bad-endpoints.js'

const options = JSON.parse(process.argv[2] ?? '{}') as { count: number; badness: Badness }
const endpoints = await startBadEndpoints(options.count, options.badness)

let stopping: Promise<void> | undefined
function stop(): Promise<void> {
  stopping ??= (async () => {
    await endpoints.close()
    process.send?.({ requests: endpoints.requests(), bytesSent: endpoints.bytesSent() })
    process.exit(0)
  })()
  return stopping
}
process.on('message', (message) => {
  if (message === 'stop') void stop()
})
process.once('disconnect', () => void stop())
process.send?.({ urls: endpoints.urls })
