// The example is what a reader copies: it must stand on public packages, each declared in its own package.json.
// A workspace-private package (the test harness) would resolve here through the monorepo's links and fail only in
// the reader's copy, so the imports are read from the sources, not trusted to a successful run.
import { readdirSync, readFileSync } from 'node:fs'
import { builtinModules } from 'node:module'
import { join, relative, resolve } from 'node:path'
import { fileURLToPath } from 'node:url'
import ts from 'typescript'
import { describe, expect, it } from 'vitest'

const EXAMPLE = resolve(fileURLToPath(new URL('..', import.meta.url)))
const ROOT = resolve(EXAMPLE, '../..')

interface Manifest {
  readonly name: string
  readonly private?: boolean
  readonly dependencies?: Record<string, string>
  readonly devDependencies?: Record<string, string>
}

function readManifest(directory: string): Manifest {
  return JSON.parse(readFileSync(join(directory, 'package.json'), 'utf8')) as Manifest
}

/** The private packages of the workspace, by name: what no registry will ever serve. */
function privateWorkspacePackages(): string[] {
  const directories = ['packages', 'examples', 'deploy'].flatMap((parent) =>
    readdirSync(join(ROOT, parent), { withFileTypes: true })
      .filter((entry) => entry.isDirectory())
      .map((entry) => join(ROOT, parent, entry.name)),
  )
  return [...directories, join(ROOT, 'test'), join(ROOT, 'test/harness'), join(ROOT, 'bench')]
    .flatMap((directory) => {
      try {
        return [readManifest(directory)]
      } catch {
        return [] // not a package
      }
    })
    .filter((manifest) => manifest.private === true)
    .map((manifest) => manifest.name)
}

/** The example's TypeScript files a reader copies: the services, the demo, the snippets, the scripts. */
function sources(directory = EXAMPLE): string[] {
  return readdirSync(directory, { withFileTypes: true }).flatMap((entry) => {
    if (entry.name === 'node_modules' || entry.name === 'test') return []
    const path = join(directory, entry.name)
    if (entry.isDirectory()) return sources(path)
    return entry.name.endsWith('.ts') ? [path] : []
  })
}

/** The package a bare specifier names: `@scope/name/sub` → `@scope/name`, `name/sub` → `name`. */
function packageOf(specifier: string): string {
  const parts = specifier.split('/')
  return specifier.startsWith('@') ? parts.slice(0, 2).join('/') : parts[0]!
}

describe('the orders example’s dependencies', () => {
  const manifest = readManifest(EXAMPLE)
  const declared = { ...manifest.dependencies, ...manifest.devDependencies }

  it('declares no private workspace package', () => {
    const privates = privateWorkspacePackages()
    expect(privates).toContain('@outbox/test-harness')
    expect(Object.keys(declared).filter((name) => privates.includes(name))).toEqual([])
  })

  it('imports only packages it declares (or Node’s own modules)', () => {
    const files = sources()
    expect(files.map((file) => relative(EXAMPLE, file))).toContain('src/demo/demo-databases.ts')
    const undeclared = files.flatMap((file) =>
      // TypeScript's own scanner: static imports, re-exports and import() alike.
      ts
        .preProcessFile(readFileSync(file, 'utf8'), true, true)
        .importedFiles.map((imported) => imported.fileName)
        .filter((specifier) => !specifier.startsWith('.') && !specifier.startsWith('node:'))
        .filter((specifier) => !builtinModules.includes(specifier))
        .filter((specifier) => declared[packageOf(specifier)] === undefined)
        .map((specifier) => `${relative(EXAMPLE, file)}: ${specifier}`),
    )
    expect(undeclared).toEqual([])
  })
})
