// Code a reader copies builds its pool the way the docs teach: a pg.Pool with no 'error' listeners exits the process
// on the first database restart (pg emits 'error' on the pool for an idle client, on the client for a lent one),
// so no README block or TSDoc example may show one bare.
import { existsSync, readdirSync, readFileSync } from 'node:fs'
import { join, relative, resolve } from 'node:path'
import { fileURLToPath } from 'node:url'
import { describe, expect, it } from 'vitest'

const ROOT = resolve(fileURLToPath(new URL('../..', import.meta.url)))

/** The fenced TypeScript blocks of a Markdown text, with the line each starts on. */
function markdownBlocks(text: string): { line: number; code: string }[] {
  return [...text.matchAll(/```ts\n([\s\S]*?)```/g)].map((match) => ({
    line: text.slice(0, match.index).split('\n').length,
    code: match[1]!,
  }))
}

/** The fenced TypeScript blocks of a source file's TSDoc, with their leading ` * ` removed. */
function tsdocBlocks(text: string): { line: number; code: string }[] {
  return markdownBlocks(text).map(({ line, code }) => ({
    line,
    code: code
      .split('\n')
      .map((row) => row.replace(/^\s*\* ?/, ''))
      .join('\n'),
  }))
}

/**
 * Why a block's pool could crash its process, or undefined when it cannot: a block that builds a `pg.Pool` must
 * listen for 'error' on the pool and on each client it connects, or hand it to `guardPool`.
 */
function bareProblem(code: string): string | undefined {
  if (!/new (pg\.)?Pool\(/.test(code) || /guardPool\(/.test(code)) return undefined
  const missing = [
    ...(/\bpool\.on\(\s*'error'/.test(code) ? [] : ["pool.on('error', …)"]),
    ...(/client\.on\(\s*'error'/.test(code) ? [] : ["pool.on('connect', (client) => client.on('error', …))"]),
  ]
  return missing.length === 0 ? undefined : `builds a pg.Pool without ${missing.join(' and ')}`
}

/** Every README of the repository: the root's, each package's and each example's. */
function readmes(): string[] {
  const files = [join(ROOT, 'README.md')]
  for (const parent of ['packages', 'examples']) {
    for (const entry of readdirSync(join(ROOT, parent), { withFileTypes: true })) {
      const readme = join(ROOT, parent, entry.name, 'README.md')
      if (entry.isDirectory() && existsSync(readme)) files.push(readme)
    }
  }
  return files
}

/** Every TypeScript source file of the published packages, where the TSDoc examples are. */
function packageSources(): string[] {
  return readdirSync(join(ROOT, 'packages'), { withFileTypes: true })
    .filter((entry) => entry.isDirectory() && existsSync(join(ROOT, 'packages', entry.name, 'src')))
    .flatMap((entry) => {
      const src = join(ROOT, 'packages', entry.name, 'src')
      return readdirSync(src, { recursive: true, encoding: 'utf8' })
        .filter((path) => path.endsWith('.ts'))
        .map((path) => join(src, path))
    })
}

function problemsIn(files: string[], blocksOf: (text: string) => { line: number; code: string }[]): string[] {
  return files.flatMap((file) =>
    blocksOf(readFileSync(file, 'utf8')).flatMap(({ line, code }) => {
      const problem = bareProblem(code)
      return problem === undefined ? [] : [`${relative(ROOT, file)}:${line} ${problem}`]
    }),
  )
}

describe('pools in the docs', () => {
  it('no README block builds a pg.Pool without both error listeners', () => {
    expect(problemsIn(readmes(), markdownBlocks)).toEqual([])
  })

  it('no TSDoc example builds a pg.Pool without both error listeners', () => {
    const sources = packageSources()
    expect(sources.length).toBeGreaterThan(50)
    expect(problemsIn(sources, tsdocBlocks)).toEqual([])
  })

  it('tells a bare pool from a guarded one', () => {
    const bare =
      'const pool = new pg.Pool({ connectionString })\nconst db = new Kysely({ dialect: new PostgresDialect({ pool }) })'
    expect(bareProblem(bare)).toMatch(/without pool\.on\('error', …\) and pool\.on\('connect'/)
    expect(bareProblem(`${bare}\npool.on('error', () => {})`)).toMatch(/without pool\.on\('connect'/)
    const both = `${bare}\npool.on('error', () => {})\npool.on('connect', (client) => client.on('error', () => {}))`
    expect(bareProblem(both)).toBeUndefined()
    expect(bareProblem('const pool = guardPool(new pg.Pool({ connectionString }))')).toBeUndefined()
    expect(
      bareProblem("import { createPool } from '@outbox/consumer'\nconst pool = createPool()"),
    ).toBeUndefined()
    const inline = 'new Kysely({ dialect: new PostgresDialect({ pool: new pg.Pool({ connectionString }) }) })'
    expect(bareProblem(inline)).toBeDefined()
    expect(tsdocBlocks(' * ```ts\n * const pool = new pg.Pool()\n * ```')[0]!.code).toBe(
      'const pool = new pg.Pool()\n',
    )
  })
})
