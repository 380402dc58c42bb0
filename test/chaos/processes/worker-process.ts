// A producer worker in its own OS process: writes orders and their outbox events in one transaction each, rolls
// back a share of them on purpose, and keeps going through PostgreSQL restarts. Its counters are figures only;
// what was committed is read from the producer database after the run.
import { enqueue } from '@outbox/producer'
import { sql } from 'kysely'
import { SeededRandom } from '../seeded-random.js'
import { onCommand, openDatabase, readConfig, send, sleep, waitForStart } from './child-support.js'

/** What the orchestrator passes to a worker process. */
export interface WorkerProcessConfig {
  readonly url: string
  readonly worker: number
  readonly workers: number
  /** How many times this worker was started before (a restarted worker gets fresh tags and a fresh stream). */
  readonly incarnation: number
  readonly seed: number
  /** Orders are `1`…`orders`; every order has two aggregates, `('order', id)` and `('refund', id)`. */
  readonly orders: number
  /** Transactions per worker running at the same time. */
  readonly loops: number
  readonly rollbackShare: number
  /** Share of events marked poison (the subscriber's handler always throws on them); 0 outside poison modes. */
  readonly poisonShare: number
  /**
   * Poison only this long after the start: each poison event takes the whole finite schedule to die, so poison
   * written early dies while the faults still run and the drain does not wait a full schedule for the last one.
   */
  readonly poisonForMs: number
  /**
   * Orders `orders + 1`…`orders + quietPoisonOrders` (aggregate type `order`): each gets ONE poison event at the
   * start from its owner (id modulo workers) and nothing else until the orchestrator says `release` — after every
   * poison event died — so these lanes have nothing queued behind their dead head when later events arrive.
   */
  readonly quietPoisonOrders: number
  readonly pauseMs: readonly [number, number]
}

/** Thrown inside a transaction to roll it back on purpose. */
class IntendedRollback extends Error {}

const config = readConfig<WorkerProcessConfig>()
await waitForStart()
const db = openDatabase(config.url, config.loops + 1)
const stats = {
  committed: 0,
  committedEvents: 0,
  rolledBack: 0,
  rolledBackEvents: 0,
  failed: 0,
  failedEvents: 0,
  poisonCommitted: 0,
}
// At most one poison event per aggregate, and only this worker poisons its share of orders: under 'skip' each
// poison event holds its lane for the whole retry schedule, which keeps the drain short and predictable.
const poisoned = new Set<string>()
let stopping = false
let released = false
onCommand((command) => {
  if (command === 'release') released = true
})

interface Step {
  readonly type: 'order' | 'refund'
  readonly orderId: string
}

function planTransaction(random: SeededRandom): Step[] {
  const last = released ? config.orders + config.quietPoisonOrders : config.orders
  const first = random.int(1, last)
  const ids = [first]
  if (random.chance(0.25)) {
    const second = random.int(1, last)
    if (second !== first) ids.push(second)
  }
  // Row locks in one global order (orders rows by id, each row before its counters): no deadlocks between workers.
  ids.sort((a, b) => a - b)
  const steps: Step[] = []
  for (const id of ids) {
    const count = random.chance(0.3) ? 2 : 1
    for (let i = 0; i < count; i++)
      steps.push({ type: random.chance(0.7) ? 'order' : 'refund', orderId: String(id) })
  }
  return steps
}

async function runLoop(loop: number): Promise<void> {
  const random = new SeededRandom(config.seed).fork(`worker-${config.worker}-${config.incarnation}-${loop}`)
  let txn = 0
  while (!stopping) {
    txn += 1
    const steps = planTransaction(random)
    const rollback = random.chance(config.rollbackShare) ? random.pick(['throw', 'sql-error'] as const) : null
    const holdLocksMs = rollback && random.chance(0.5) ? random.int(1, 30) : 0
    let poisons = 0
    try {
      await db.transaction().execute(async (trx) => {
        for (const [index, step] of steps.entries()) {
          const tag = `w${config.worker}.${config.incarnation}.${loop}.${txn}.${index}`
          const aggregate = `${step.type}:${step.orderId}`
          const poison =
            config.poisonShare > 0 &&
            performance.now() - startedAt < config.poisonForMs &&
            config.incarnation === 0 &&
            Number(step.orderId) % config.workers === config.worker &&
            !poisoned.has(aggregate) &&
            random.chance(config.poisonShare)
          if (poison) {
            poisoned.add(aggregate)
            poisons += 1
          }
          await sql`
            INSERT INTO orders (id, version) VALUES (${step.orderId}, 1)
            ON CONFLICT (id) DO UPDATE SET version = orders.version + 1`.execute(trx)
          await sql`INSERT INTO order_changes (tag, order_id, aggregate_type) VALUES (${tag}, ${step.orderId}, ${step.type})`.execute(
            trx,
          )
          await enqueue(trx, {
            aggregateType: step.type,
            aggregateId: step.orderId,
            eventType: `${step.type}.changed`,
            // The intent rides in the payload: a rolled-back event must never be seen by the subscriber.
            payload: { tag, intent: rollback ? 'rollback' : 'commit', ...(poison ? { poison: true } : {}) },
          })
        }
        // Other writers of these aggregates now wait on the counter rows; after the rollback they must take
        // over the same sequences, leaving no gap.
        if (holdLocksMs > 0) await sleep(holdLocksMs)
        if (rollback === 'throw') throw new IntendedRollback()
        if (rollback === 'sql-error') {
          const first = `w${config.worker}.${config.incarnation}.${loop}.${txn}.0`
          await sql`INSERT INTO order_changes (tag, order_id, aggregate_type) VALUES (${first}, '0', 'order')`.execute(
            trx,
          )
        }
      })
      stats.committed += 1
      stats.committedEvents += steps.length
      stats.poisonCommitted += poisons
    } catch (error) {
      const intended =
        error instanceof IntendedRollback ||
        (rollback === 'sql-error' && (error as { code?: unknown }).code === '23505')
      if (intended) {
        stats.rolledBack += 1
        stats.rolledBackEvents += steps.length
      } else {
        // A restart or a lost connection: the commit may or may not have happened. Only the database knows.
        stats.failed += 1
        stats.failedEvents += steps.length
        await sleep(random.int(20, 100))
      }
    }
    await sleep(random.int(config.pauseMs[0], config.pauseMs[1]))
  }
}

/** Writes this worker's quiet poison events: one transaction each, retried through faults (bounded). */
async function poisonQuietOrders(): Promise<void> {
  if (config.incarnation > 0) return
  for (let id = config.orders + 1; id <= config.orders + config.quietPoisonOrders; id++) {
    if (id % config.workers !== config.worker) continue
    const tag = `w${config.worker}.${config.incarnation}.q.${id}.0`
    for (let attempt = 1; attempt <= 5 && !stopping; attempt++) {
      try {
        await db.transaction().execute(async (trx) => {
          await sql`INSERT INTO orders (id, version) VALUES (${String(id)}, 1)`.execute(trx)
          await sql`INSERT INTO order_changes (tag, order_id, aggregate_type) VALUES (${tag}, ${String(id)}, 'order')`.execute(
            trx,
          )
          await enqueue(trx, {
            aggregateType: 'order',
            aggregateId: String(id),
            eventType: 'order.changed',
            payload: { tag, intent: 'commit', poison: true },
          })
        })
        poisoned.add(`order:${id}`)
        stats.committed += 1
        stats.committedEvents += 1
        stats.poisonCommitted += 1
        break
      } catch (error) {
        // A unique violation means an earlier try did commit (its answer was lost in a restart).
        if ((error as { code?: unknown }).code === '23505') break
        stats.failed += 1
        stats.failedEvents += 1
        await sleep(200)
      }
    }
  }
}

const startedAt = performance.now()
const reporter = setInterval(() => send({ stats }), 200)
await poisonQuietOrders()
const loops = Array.from({ length: config.loops }, (_, loop) => runLoop(loop))
send({ ready: true })
process.once('SIGTERM', async () => {
  stopping = true
  await Promise.allSettled(loops)
  clearInterval(reporter)
  send({ stats })
  await db.destroy()
  process.exit(0)
})
