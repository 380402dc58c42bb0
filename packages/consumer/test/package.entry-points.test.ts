/**
 * What the built main entry loads: an application that installs the consumer without Express or Fastify (a Hono,
 * Next.js or plain node:http app) must be able to import it and type-check against it. Reads `dist/` as
 * `pnpm build` leaves it, following every relative import from the entry, at run time and in the declarations.
 */
import { existsSync, readFileSync } from 'node:fs'
import { dirname, join, resolve } from 'node:path'
import { fileURLToPath } from 'node:url'
import ts from 'typescript'
import { describe, expect, it } from 'vitest'

const PACKAGE = resolve(dirname(fileURLToPath(import.meta.url)), '..')
const DIST = join(PACKAGE, 'dist')

/** Every bare specifier (a package, not a relative file) reachable from `entry` through relative imports. */
function packagesReachedFrom(entry: string): Map<string, string> {
  const reached = new Map<string, string>() // specifier → the first file that imports it
  const seen = new Set<string>()
  const pending = [join(DIST, entry)]
  while (pending.length > 0) {
    const file = pending.pop()!
    if (seen.has(file)) continue
    seen.add(file)
    if (!existsSync(file)) throw new Error(`${file} is missing: run pnpm build before this test`)
    // TypeScript's own scanner: imports, re-exports, import() and import('x').T types — never a TSDoc example.
    const { importedFiles } = ts.preProcessFile(readFileSync(file, 'utf8'), true, true)
    for (const { fileName: specifier } of importedFiles) {
      if (specifier.startsWith('.')) {
        const target = resolve(dirname(file), specifier)
        // A declaration imports `./x.js`, whose types are in `./x.d.ts`.
        pending.push(file.endsWith('.d.ts') ? target.replace(/\.js$/, '.d.ts') : target)
      } else if (!reached.has(specifier)) reached.set(specifier, file.slice(DIST.length + 1))
    }
  }
  return reached
}

/**
 * What the main entry may load: its dependencies (`@standard-schema/spec` is types only), its database peers,
 * prom-client (an optional peer, imported only inside `consumerMetrics`), and Node's own modules — never a server.
 */
const ALLOWED = (specifier: string) =>
  specifier.startsWith('node:') ||
  specifier === '@outbox/protocol' ||
  specifier === '@standard-schema/spec' ||
  specifier === 'kysely' ||
  specifier.startsWith('kysely/') ||
  specifier === 'pg' ||
  specifier === 'prom-client'

describe('the main entry of @outbox/consumer', () => {
  for (const entry of ['index.js', 'index.d.ts']) {
    it(`${entry} reaches no server package: neither express nor fastify`, () => {
      const reached = packagesReachedFrom(entry)
      const foreign = [...reached].filter(([specifier]) => !ALLOWED(specifier))
      expect(foreign).toEqual([])
      expect([...reached.keys()]).toContain('@outbox/protocol')
    })
  }

  it('the Fastify entry does import fastify (the scan sees what it is looking for)', () => {
    expect([...packagesReachedFrom('fastify.d.ts').keys()]).toContain('fastify')
  })

  it('declares express, @types/express and fastify as optional peers, kysely as a required one', () => {
    const manifest = JSON.parse(readFileSync(join(PACKAGE, 'package.json'), 'utf8')) as {
      dependencies?: Record<string, string>
      peerDependencies: Record<string, string>
      peerDependenciesMeta: Record<string, { optional?: boolean }>
    }
    for (const name of ['express', '@types/express', 'fastify']) {
      expect(manifest.peerDependencies[name], name).toBeDefined()
      expect(manifest.peerDependenciesMeta[name]?.optional, name).toBe(true)
      expect(manifest.dependencies?.[name], name).toBeUndefined()
    }
    expect(manifest.peerDependencies.kysely).toBeDefined()
    expect(manifest.peerDependenciesMeta.kysely?.optional).not.toBe(true)
  })
})
