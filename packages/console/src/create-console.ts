import {
  type DeliveryAttempt,
  discardDeadLetters,
  getDeadLetter,
  type LaneState,
  listAudit,
  listDeadLetters,
  listDeliveryAttempts,
  listLanes,
  listSubscriptions,
  OutboxError,
  redrive,
  skipLaneHead,
  stats,
  throughput,
  unblockLane,
} from '@outbox/producer'
import { isUuid } from '@outbox/protocol'
import express, { type NextFunction, type Request, type Response, type Router } from 'express'
import helmet from 'helmet'
import { loadAssets } from './assets.js'
import { type Authenticated, ConsoleAuth, SESSION_COOKIE, SESSION_TTL_MS } from './auth.js'
import { crossSiteReason, forgeryReason } from './csrf.js'
import {
  type DeadLetterQuery,
  hasFilter,
  readDeadLetterQuery,
  toDeadLetterFilter,
} from './dead-letter-query.js'
import { FLASH_PARAM, type Flash, FlashSeal } from './flash.js'
import { requestOrigin } from './forwarded.js'
import { LagSampler } from './lag-sampler.js'
import { LoginBackoff } from './login-backoff.js'
import { type ConsoleOptions, resolveConsoleOptions } from './options.js'
import { auditPage } from './pages/audit.js'
import { deadLettersPage } from './pages/dead-letters.js'
import { eventPage } from './pages/event.js'
import { LANE_STATES, lanesPage } from './pages/lanes.js'
import type { PageContext } from './pages/layout.js'
import { loginPage, problemPage, unauthorizedPage } from './pages/login.js'
import { overviewPage } from './pages/overview.js'
import { discardPreviewPage, redrivePreviewPage } from './pages/preview.js'
import { readSnapshot } from './read-snapshot.js'

/** The console as {@link createConsole} returns it: an Express router to mount, and `close()`. */
export interface OutboxConsole extends Router {
  /** Stops the lag sampler (and waits for a sample in progress); call it before closing the database pool. */
  close(): Promise<void>
}

/** The exact Content-Security-Policy of every response: nothing inline, nothing from elsewhere. */
export const CONSOLE_CSP_DIRECTIVES = {
  defaultSrc: ["'none'"],
  scriptSrc: ["'self'"],
  styleSrc: ["'self'"],
  imgSrc: ["'self'", 'data:'],
  connectSrc: ["'self'"],
  formAction: ["'self'"],
  frameAncestors: ["'none'"],
  baseUri: ["'none'"],
} as const

/** A query or form field as one string, or undefined when absent or empty. */
function field(source: unknown, name: string): string | undefined {
  const value = (source as Record<string, unknown> | undefined)?.[name]
  const one = Array.isArray(value) ? value[0] : value
  return typeof one === 'string' && one.trim() !== '' ? one.trim() : undefined
}

function positiveInt(value: string | undefined, fallback: number, max: number): number {
  const parsed = value === undefined ? Number.NaN : Number(value)
  return Number.isSafeInteger(parsed) && parsed > 0 ? Math.min(parsed, max) : fallback
}

function wantsJson(request: Request): boolean {
  const accept = request.headers.accept ?? ''
  return accept.includes('application/json') && !accept.includes('text/html')
}

/**
 * Creates the operator's console: server-rendered pages over the producer's public API (health, lanes, dead
 * letters, an event's delivery log, the audit log) and, with `actions: true`, the buttons that fix things — each a
 * POST form, guarded against cross-site forgery and recorded in the audit log under the user's actor. Mount it in
 * an admin app; every page needs the token (bearer or `/login` session) or the `authorize` hook's approval.
 *
 * @example
 * ```ts
 * import { createConsole } from '@outbox/console'
 * import express from 'express'
 * import type { Kysely } from 'kysely'
 * declare const db: Kysely<any>
 * const outboxConsole = createConsole({ db, token: process.env.OUTBOX_CONSOLE_TOKEN!, actions: true })
 * express().use('/outbox', outboxConsole).listen(8080, '127.0.0.1')
 * ```
 */
export function createConsole(options: ConsoleOptions): OutboxConsole {
  const resolved = resolveConsoleOptions(options)
  const { db, schema, statementTimeoutMs, refreshMs } = resolved
  const auth = new ConsoleAuth(resolved)
  const assets = loadAssets()
  const sampler = new LagSampler(db, { intervalMs: refreshMs, statementTimeoutMs, schema })
  const read = <T>(fn: Parameters<typeof readSnapshot<T>>[2]) => readSnapshot(db, statementTimeoutMs, fn)
  const baseOf = (request: Request) => resolved.basePath ?? request.baseUrl
  const { trustProxy, logger } = resolved
  const backoff = new LoginBackoff()
  const flashes = new FlashSeal()
  const tokenLogin = resolved.tokens.length > 0
  const router = express.Router()

  router.use(
    helmet({
      contentSecurityPolicy: { useDefaults: false, directives: CONSOLE_CSP_DIRECTIVES },
      referrerPolicy: { policy: 'no-referrer' },
      strictTransportSecurity: false,
    }),
  )
  router.use((_request, response, next) => {
    // Pages hold live operational data and, for sessions, a form token: never cached, by a browser or a proxy.
    response.set('Cache-Control', 'no-store')
    next()
  })
  router.use(express.urlencoded({ extended: false, limit: '32kb', parameterLimit: 50 }))

  router.get('/assets/:name', (request, response, next) => {
    const asset = assets.get(String(request.params.name))
    if (asset === undefined) return next()
    response.type(asset.type).send(asset.body)
  })

  router.get('/login', (request, response) => {
    response.type('html').send(loginPage(baseOf(request), { failed: false, tokenLogin }))
  })
  router.post('/login', (request, response) => {
    const base = baseOf(request)
    const crossSite = crossSiteReason(request, trustProxy)
    if (crossSite !== null) {
      response
        .status(403)
        .type('html')
        .send(problemPage(base, 'Refused', `Refused ${crossSite}.`))
      return
    }
    const origin = requestOrigin(request, trustProxy)
    const now = Date.now()
    // A throttled attempt is answered before its token is looked at: a guess made then learns nothing.
    const decision = backoff.check(origin.client, now)
    if (!decision.allowed) {
      const seconds = Math.max(1, Math.ceil(decision.retryAfterMs / 1000))
      response
        .status(429)
        .set('Retry-After', String(seconds))
        .type('html')
        .send(
          loginPage(base, {
            failed: false,
            tokenLogin,
            throttled: `Too many failed sign-ins${decision.scope === 'global' ? ' on this console' : ''}: try again in ${seconds} s.`,
          }),
        )
      return
    }
    const actor = auth.actorOf(field(request.body, 'token'))
    if (actor === undefined) {
      for (const start of backoff.fail(origin.client, now)) {
        // One line per burst, when it starts to be throttled; the attempts it refuses after that stay quiet.
        logger.warn(
          start.scope === 'client'
            ? { client: origin.client, failures: start.failures }
            : { failures: start.failures },
          start.scope === 'client'
            ? `console: ${start.failures} failed sign-ins from ${origin.client}: its sign-ins are throttled`
            : `console: ${start.failures} failed sign-ins from all clients: every sign-in is throttled`,
        )
      }
      response
        .status(401)
        .type('html')
        .send(loginPage(base, { failed: true, tokenLogin }))
      return
    }
    backoff.succeed(origin.client)
    response.cookie(SESSION_COOKIE, auth.startSession(actor), {
      httpOnly: true,
      sameSite: 'strict',
      // Over TLS the cookie must never travel in clear; behind a TLS proxy the proxy says whether it was TLS.
      secure: origin.secure,
      path: base === '' ? '/' : base,
      maxAge: SESSION_TTL_MS,
    })
    response.redirect(303, `${base}/`)
  })

  router.use(async (request, response, next) => {
    const user = await auth.authenticate(request)
    if (user === null) {
      if (wantsJson(request))
        response.status(401).json({ error: 'unauthorized', login: `${baseOf(request)}/login` })
      else
        response
          .status(401)
          .type('html')
          .send(unauthorizedPage(baseOf(request)))
      return
    }
    response.locals.user = user
    if (request.method === 'POST') {
      const forgery = forgeryReason(request, user, trustProxy)
      if (forgery !== null) {
        response
          .status(403)
          .type('html')
          .send(problemPage(baseOf(request), 'Refused', `Refused ${forgery}.`))
        return
      }
    }
    next()
  })

  router.post('/logout', (request, response) => {
    auth.endSession(request)
    const base = baseOf(request)
    response.clearCookie(SESSION_COOKIE, { path: base === '' ? '/' : base })
    response.redirect(303, `${base}/login`)
  })

  const userOf = (request: Request): Authenticated => request.res!.locals.user as Authenticated
  const context = (request: Request): PageContext => {
    const user = userOf(request)
    return {
      base: baseOf(request),
      user,
      canAct: user.canAct,
      refreshMs,
      flash: flashes.open(field(request.query, FLASH_PARAM)),
    }
  }

  /** Every action route: refused unless the console's actions are on and this user may act. */
  const mayAct = (request: Request, res: Response, next: NextFunction) => {
    if (userOf(request).canAct) return next()
    res
      .status(403)
      .type('html')
      .send(
        problemPage(
          baseOf(request),
          'Refused',
          resolved.actions
            ? 'You may look but not act.'
            : 'This console is read-only (it was started without actions).',
        ),
      )
  }
  /** Sends the browser back to `path` with the action's outcome, sealed, so only the server's words show. */
  const done = (
    request: Request,
    res: Response,
    path: string,
    outcome: { ok: string } | { error: string },
  ) => {
    const flash: Flash =
      'ok' in outcome ? { kind: 'ok', text: outcome.ok } : { kind: 'error', text: outcome.error }
    res.redirect(
      303,
      `${baseOf(request)}${path}${path.includes('?') ? '&' : '?'}${new URLSearchParams({ [FLASH_PARAM]: flashes.seal(flash) })}`,
    )
  }

  router.get('/', async (request, res) => {
    const data = await read(async (trx) => {
      const [snapshot, subscriptions] = await Promise.all([
        stats(trx, { schema }),
        listSubscriptions(trx, { schema }),
      ])
      const lastFailures = new Map<string, DeliveryAttempt>()
      for (const share of snapshot.subscriptions) {
        // The newest failed attempt among the latest few: the delivery log may keep failures only, or nothing.
        const attempts = await listDeliveryAttempts(trx, { subscriptionId: share.id, limit: 20, schema })
        const failed = attempts.find((attempt) => attempt.outcome !== 'delivered')
        if (failed) lastFailures.set(share.id, failed)
      }
      return { stats: snapshot, subscriptions, lastFailures }
    })
    res.type('html').send(overviewPage(context(request), data))
  })

  router.get('/api/throughput', async (_request, res) => {
    const buckets = await read((trx) => throughput(trx, { windowMs: 3_600_000, bucketMs: 60_000, schema }))
    res.json({
      bucketMs: 60_000,
      buckets: buckets.map((bucket) => ({ at: bucket.at.getTime(), sent: bucket.sent })),
    })
  })
  router.get('/api/lag', (_request, res) => {
    res.json({ intervalMs: refreshMs, samples: sampler.samples() })
  })

  router.get('/lanes', async (request, res) => {
    const asked = field(request.query, 'state')
    const state: LaneState = LANE_STATES.find((one) => one === asked) ?? 'blocked'
    const subscription = field(request.query, 'subscription')
    const data = await read(async (trx) => ({
      subscriptions: await listSubscriptions(trx, { schema }),
      lanes: await listLanes(trx, { state, subscriptionId: subscription, limit: 200, schema }),
    }))
    res.type('html').send(lanesPage(context(request), { state, subscription, ...data }))
  })
  /** The lane a lane action names, from its form. */
  const laneOf = (request: Request) => ({
    subscriptionId: field(request.body, 'subscriptionId') ?? '',
    aggregateType: field(request.body, 'aggregateType') ?? '',
    aggregateId: field(request.body, 'aggregateId') ?? '',
  })
  router.post('/lanes/unblock', mayAct, async (request, res) => {
    const lane = laneOf(request)
    const name = `${lane.aggregateType}/${lane.aggregateId}`
    try {
      const result = await unblockLane(db, { ...lane, actor: userOf(request).actor, schema })
      const what =
        result.outcome === 'resumed'
          ? `resumed after its dead letter ${result.blockerEventId} (still dead, redrivable)`
          : 'its 409 park cleared'
      done(request, res, '/lanes?state=blocked', {
        ok: `Unblocked ${name}: ${what}; ${result.released} events due now.`,
      })
    } catch (error) {
      if (!(error instanceof OutboxError)) throw error
      done(request, res, '/lanes?state=blocked', { error: `Could not unblock ${name}: ${error.message}` })
    }
  })
  router.post('/lanes/skip-head', mayAct, async (request, res) => {
    const lane = laneOf(request)
    const name = `${lane.aggregateType}/${lane.aggregateId}`
    try {
      const result = await skipLaneHead(db, { ...lane, actor: userOf(request).actor, schema })
      done(request, res, '/lanes?state=struggling', {
        ok: `Skipped ${name} #${result.sequence}: event ${result.eventId} is a dead letter now (redrivable); ${result.released} events due now.`,
      })
    } catch (error) {
      if (!(error instanceof OutboxError)) throw error
      done(request, res, '/lanes?state=struggling', {
        error: `Could not skip the head of ${name}: ${error.message}`,
      })
    }
  })

  router.get('/dead-letters', async (request, res) => {
    const query = readDeadLetterQuery(request.query)
    const limit = positiveInt(field(request.query, 'limit'), 100, 500)
    const data = await read(async (trx) => ({
      subscriptions: await listSubscriptions(trx, { schema }),
      deadLetters: await listDeadLetters(trx, { ...toDeadLetterFilter(query), limit, schema }),
    }))
    res.type('html').send(deadLettersPage(context(request), { query, limit, ...data }))
  })
  /** Back to the dead letters, with the same filter. */
  const deadLettersPath = (query: DeadLetterQuery) =>
    hasFilter(query) ? `/dead-letters?${new URLSearchParams({ ...query })}` : '/dead-letters'
  router.post('/dead-letters/redrive', mayAct, async (request, res) => {
    const eventId = field(request.body, 'eventId') ?? ''
    const subscriptionId = field(request.body, 'subscriptionId')
    try {
      const result = await redrive(db, {
        eventIds: [eventId],
        subscriptionId,
        actor: userOf(request).actor,
        schema,
      })
      done(
        request,
        res,
        '/dead-letters',
        result.redriven.length > 0
          ? { ok: `Redriven: event ${eventId} is pending again.` }
          : { error: `Event ${eventId} is not a dead letter any more.` },
      )
    } catch (error) {
      if (!(error instanceof OutboxError)) throw error
      done(request, res, '/dead-letters', { error: error.message })
    }
  })
  router.post('/dead-letters/redrive-matching', mayAct, async (request, res) => {
    const query = readDeadLetterQuery(request.body)
    if (!hasFilter(query)) {
      done(request, res, '/dead-letters', { error: 'Choose a filter first: the bulk redrive needs one.' })
      return
    }
    const filter = toDeadLetterFilter(query)
    const actor = userOf(request).actor
    if (field(request.body, 'confirm') !== '1') {
      const preview = await redrive(db, { filter, dryRun: true, actor, schema })
      res.type('html').send(redrivePreviewPage(context(request), query, preview))
      return
    }
    try {
      const result = await redrive(db, { filter, actor, schema })
      done(request, res, deadLettersPath(query), {
        ok: `Redriven ${result.deliveries.length} dead letters (${result.redriven.length} events): pending again.`,
      })
    } catch (error) {
      if (!(error instanceof OutboxError)) throw error
      done(request, res, deadLettersPath(query), { error: error.message })
    }
  })
  router.post('/dead-letters/discard', mayAct, async (request, res) => {
    const query = readDeadLetterQuery(request.body)
    if (!hasFilter(query)) {
      done(request, res, '/dead-letters', { error: 'Choose a filter first: discarding needs one.' })
      return
    }
    const filter = toDeadLetterFilter(query)
    const actor = userOf(request).actor
    const unblockLanes = field(request.body, 'unblockLanes') === '1'
    if (field(request.body, 'confirm') !== '1') {
      try {
        const preview = await discardDeadLetters(db, { filter, unblockLanes, dryRun: true, actor, schema })
        res.type('html').send(discardPreviewPage(context(request), query, { result: preview, unblockLanes }))
      } catch (error) {
        if (!(error instanceof OutboxError) || error.code !== 'ERR_OUTBOX_REFUSED') throw error
        res.type('html').send(discardPreviewPage(context(request), query, { refusal: error.message }))
      }
      return
    }
    try {
      const result = await discardDeadLetters(db, { filter, unblockLanes, actor, schema })
      done(request, res, deadLettersPath(query), {
        ok: `Discarded ${result.discarded.length} dead letters${
          result.unblocked.length > 0 ? `; resumed ${result.unblocked.length} lanes` : ''
        }.`,
      })
    } catch (error) {
      if (!(error instanceof OutboxError)) throw error
      done(request, res, deadLettersPath(query), { error: error.message })
    }
  })

  router.get('/events/:eventId', async (request, res) => {
    const eventId = String(request.params.eventId)
    if (!isUuid(eventId)) {
      res
        .status(404)
        .type('html')
        .send(problemPage(baseOf(request), 'Not found', `No event ${eventId}.`))
      return
    }
    const subscriptionId = field(request.query, 'subscription')
    const { dead, attempts, subscriptions } = await read(async (trx) => ({
      dead: await getDeadLetter(trx, { eventId, subscriptionId, schema }),
      attempts: await listDeliveryAttempts(trx, { eventId, limit: 200, schema }),
      // The log holds ids; an operator knows subscriptions by name.
      subscriptions: await listSubscriptions(trx, { schema }),
    }))
    const subscriptionNames = new Map(
      subscriptions.map((subscription) => [subscription.id, subscription.name]),
    )
    res
      .type('html')
      .send(eventPage(context(request), { eventId, dead: dead ? [dead] : [], attempts, subscriptionNames }))
  })

  router.get('/audit', async (request, res) => {
    const limit = positiveInt(field(request.query, 'limit'), 100, 500)
    const before = field(request.query, 'before')
    const entries = await read((trx) => listAudit(trx, { limit, before, schema }))
    res.type('html').send(auditPage(context(request), entries, limit))
  })

  router.use((error: unknown, request: Request, res: Response, next: NextFunction) => {
    if (res.headersSent) return next(error)
    const base = baseOf(request)
    if (error instanceof OutboxError && error.code === 'ERR_OUTBOX_INVALID_OPTION') {
      res
        .status(400)
        .type('html')
        .send(problemPage(base, 'Bad request', error.message))
      return
    }
    if ((error as { code?: unknown }).code === '57014') {
      res
        .status(503)
        .type('html')
        .send(
          problemPage(
            base,
            'Too slow',
            `The database did not answer within ${statementTimeoutMs} ms (the console's statementTimeoutMs); try again.`,
          ),
        )
      return
    }
    next(error)
  })

  return Object.assign(router, { close: () => sampler.close() }) as OutboxConsole
}
