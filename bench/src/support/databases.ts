import type { RunningPostgres } from '@outbox/test-harness'
import pg from 'pg'

let counter = 0

/** Creates and drops the databases of one benchmark run on the embedded server; every one is dropped in the end. */
export class BenchDatabases {
  readonly #created = new Set<string>()
  readonly #schemas = new Map<string, Promise<string>>()

  constructor(readonly server: RunningPostgres) {}

  /** Connection string of database `name`. */
  url(name: string): string {
    return this.server.url(name)
  }

  /** Runs one statement as the superuser on the `postgres` database. */
  async admin(statement: string): Promise<void> {
    const client = new pg.Client({ connectionString: this.server.url() })
    await client.connect()
    try {
      await client.query(statement)
    } finally {
      await client.end()
    }
  }

  /**
   * Creates a fresh database, optionally as a copy of `template` (a seeded dataset copied per run, so every run of
   * every system starts from the same rows). Returns its name.
   */
  async create(label: string, template?: string): Promise<string> {
    counter += 1
    const name = `bench_${label.replace(/[^a-z0-9]/gi, '_').toLowerCase()}_${process.pid}_${counter}`
    // FILE_COPY copies a large seeded template far faster than the default WAL-logged copy.
    const from = template ? ` TEMPLATE ${template} STRATEGY FILE_COPY` : ''
    await this.admin(`CREATE DATABASE ${name}${from}`)
    this.#created.add(name)
    return name
  }

  /**
   * A database with a system's schema installed, made once per benchmark run and copied by {@link create}:
   * migrations are slow next to copying a small database, and every case needs fresh ones.
   */
  async schemaTemplate(kind: string, install: (url: string) => Promise<void>): Promise<string> {
    let made = this.#schemas.get(kind)
    if (!made) {
      made = this.create(`schema_${kind}`).then(async (name) => {
        await install(this.url(name))
        return name
      })
      this.#schemas.set(kind, made)
    }
    return await made
  }

  /** Drops a database this object created (closing whatever is still connected). */
  async drop(name: string): Promise<void> {
    if (!this.#created.delete(name)) return
    await this.admin(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`)
  }

  /** Drops everything still left. */
  async dropAll(): Promise<void> {
    this.#schemas.clear()
    for (const name of [...this.#created]) await this.drop(name).catch(() => {})
  }
}

/** Runs `fn` with a pg client on `url`, closing it after. */
export async function withClient<T>(url: string, fn: (client: pg.Client) => Promise<T>): Promise<T> {
  const client = new pg.Client({ connectionString: url })
  await client.connect()
  try {
    return await fn(client)
  } finally {
    await client.end()
  }
}
