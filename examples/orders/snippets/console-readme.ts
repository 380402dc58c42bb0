/** The operator's console mounted in an admin app, as packages/console/README.md shows it: type-checked, never run. */
// #region mount
import { createConsole } from '@outbox/console'
import { createPool } from '@outbox/consumer' // a pg.Pool a dropped connection cannot crash
import express from 'express'
import { Kysely, PostgresDialect } from 'kysely'

const db = new Kysely<any>({ dialect: new PostgresDialect({ pool: createPool() }) })

const outboxConsole = createConsole({
  db,
  token: process.env.OUTBOX_CONSOLE_TOKEN, // Bearer header, or typed once into /outbox/login
  actions: true, // unblock, skip head, redrive, discard; read-only without it
})

const admin = express()
admin.use('/outbox', outboxConsole)
const server = admin.listen(8080, '127.0.0.1')

process.on('SIGTERM', async () => {
  server.close()
  await outboxConsole.close() // stops the lag sampler
  await db.destroy()
})
// #endregion mount

// #region authorize
// Or let the admin app's own login decide: who the user is, and whether they may act.
export const withAppLogin = createConsole({
  db,
  actions: true,
  authorize: (req) => {
    const user = (req as express.Request & { user?: { email: string; roles: string[] } }).user
    return user ? { actor: user.email, canAct: user.roles.includes('ops') } : null
  },
})
// #endregion authorize
