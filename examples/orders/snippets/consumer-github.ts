/** The GitHub recipe of packages/consumer/README.md: type-checked in CI, never run. */
// #region consumer-github
import { createServer } from 'node:http'
import { createConsumer, createPool, githubEnvelope, githubVerifier } from '@outbox/consumer'
import { Kysely, PostgresDialect } from 'kysely'

interface Database {
  issues: { repository: string; number: number; title: string }
}
interface IssuesPayload {
  repository: { full_name: string }
  issue?: { number: number; title: string }
}

const db = new Kysely<Database>({ dialect: new PostgresDialect({ pool: createPool() }) })
const github = createConsumer<Database>({
  db,
  verify: githubVerifier(process.env.GITHUB_WEBHOOK_SECRET ?? ''), // or [new, old] while changing it
  envelope: githubEnvelope, // eventId ← X-GitHub-Delivery, type ← X-GitHub-Event + '.' + action, data ← body
  source: 'github',
  sequence: 'off', // GitHub numbers nothing
})

createServer(
  github.node<IssuesPayload>(async (event, trx) => {
    if (event.type === 'issues.opened' && event.data.issue !== undefined) {
      const { number, title } = event.data.issue
      await trx
        .insertInto('issues')
        .values({ repository: event.data.repository.full_name, number, title })
        .execute()
    }
    // 'ping' (sent when the webhook is created) and other types: recorded and answered 200.
  }),
).listen(3000)
// #endregion consumer-github
