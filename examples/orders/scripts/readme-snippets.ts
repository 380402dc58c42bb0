/**
 * Keeps the code shown in the READMEs identical to example code that CI type-checks and the demo runs.
 *
 * A fenced code block right after a marker line
 *
 *     <!-- snippet: examples/orders/src/orders-service.ts#create-order -->
 *
 * must be the region between `// #region create-order` and `// #endregion create-order` of that file,
 * dedented and formatted by Biome as Biome formats code in Markdown. The example files are in
 * `tsconfig.test.json`, so a snippet that stops compiling fails the type-check, and one that drifts from its
 * source fails this check. A TypeScript block without a marker fails it too: all shown code is checked code.
 *
 *   pnpm --filter @outbox/example-orders readme-snippets           check every README; exit 1 on a difference
 *   pnpm --filter @outbox/example-orders readme-snippets --write   rewrite the blocks from their sources
 */
import { spawnSync } from 'node:child_process'
import { readdirSync, readFileSync, writeFileSync } from 'node:fs'
import { createRequire } from 'node:module'
import { dirname, join, relative, resolve } from 'node:path'
import { fileURLToPath } from 'node:url'

/** The repository root. */
export const REPO_ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '../../..')

/** The Markdown files whose snippets are checked: the root README, every package's, every example's. */
export function markdownFiles(root = REPO_ROOT): string[] {
  const files = [join(root, 'README.md')]
  for (const parent of ['packages', 'examples']) {
    for (const entry of readdirSync(join(root, parent), { withFileTypes: true })) {
      if (!entry.isDirectory()) continue
      const readme = join(root, parent, entry.name, 'README.md')
      try {
        readFileSync(readme)
        files.push(readme)
      } catch {
        // no README in this one
      }
    }
  }
  return files
}

/** A snippet that does not match its source, or a marker that cannot be followed. */
export interface SnippetProblem {
  /** 1-based line of the marker in the Markdown file. */
  readonly line: number
  /** `path#region` as written in the marker. */
  readonly snippet: string
  readonly message: string
}

/** One marker and the code block after it. */
interface SnippetBlock {
  readonly line: number
  readonly snippet: string
  readonly path: string
  readonly region: string
  /** Line indexes of the block's content: [first, end). */
  readonly start: number
  readonly end: number
  readonly content: string
}

const MARKER = /^<!--\s*snippet:\s*(\S+?)#([\w-]+)\s*-->\s*$/

function findBlocks(lines: readonly string[]): { blocks: SnippetBlock[]; problems: SnippetProblem[] } {
  const blocks: SnippetBlock[] = []
  const problems: SnippetProblem[] = []
  lines.forEach((text, index) => {
    const marker = MARKER.exec(text.trim())
    if (!marker) return
    const [, path = '', region = ''] = marker
    const snippet = `${path}#${region}`
    const fence = lines[index + 1]?.match(/^(`{3,})(\w*)\s*$/)
    if (!fence) {
      problems.push({
        line: index + 1,
        snippet,
        message: 'the marker must be followed at once by a ``` code block',
      })
      return
    }
    const close = lines.findIndex((line, at) => at > index + 1 && line.trimEnd() === fence[1])
    if (close < 0) {
      problems.push({ line: index + 1, snippet, message: 'its code block is never closed' })
      return
    }
    blocks.push({
      line: index + 1,
      snippet,
      path,
      region,
      start: index + 2,
      end: close,
      content: lines.slice(index + 2, close).join('\n'),
    })
  })
  return { blocks, problems }
}

/** The region's lines (`// #region name` … `// #endregion name`), dedented; throws if it is missing. */
export function extractRegion(source: string, name: string): string {
  const lines = source.split('\n')
  const open = lines.findIndex((line) => line.trim() === `// #region ${name}`)
  const close = lines.findIndex((line, index) => index > open && line.trim() === `// #endregion ${name}`)
  if (open < 0 || close < 0)
    throw new Error(`no region "${name}" (// #region ${name} … // #endregion ${name})`)
  const body = lines.slice(open + 1, close)
  const indent = Math.min(
    ...body.filter((line) => line.trim() !== '').map((line) => line.length - line.trimStart().length),
  )
  return body.map((line) => line.slice(Math.min(indent, line.length - line.trimStart().length))).join('\n')
}

/**
 * Formats TypeScript as Biome does, with the repository's configuration (as it formats code blocks in
 * Markdown).
 */
export function formatTypeScript(code: string, root = REPO_ROOT): string {
  const biome = createRequire(join(root, 'package.json')).resolve('@biomejs/biome/bin/biome')
  const result = spawnSync(process.execPath, [biome, 'format', '--stdin-file-path=snippet.ts'], {
    cwd: root,
    input: code,
    encoding: 'utf8',
  })
  if (result.status !== 0) {
    // Biome leaves a Markdown block it cannot parse as it is; a region must be valid TypeScript by itself.
    throw new Error(`Biome cannot format the region by itself:\n${result.stderr || result.stdout}`)
  }
  return result.stdout.replace(/\n+$/, '')
}

/** Reads a snippet's source relative to the repository root. */
export type ReadSource = (path: string) => string

const readFromRepo: ReadSource = (path) => readFileSync(join(REPO_ROOT, path), 'utf8')

/** What a block should contain, or why it cannot be known. */
function expected(block: SnippetBlock, read: ReadSource, format: (code: string) => string): string {
  const region = extractRegion(read(block.path), block.region).replace(/\n+$/, '')
  // Equal as written: nothing to format (and `pnpm lint` keeps the Markdown itself formatted). Saves starting
  // Biome once per snippet.
  return region === block.content ? region : format(region)
}

/** Checks every snippet block of one Markdown text. */
export function checkMarkdown(
  markdown: string,
  read: ReadSource = readFromRepo,
  format: (code: string) => string = (code) => formatTypeScript(code),
): SnippetProblem[] {
  const { blocks, problems } = findBlocks(markdown.split('\n'))
  for (const block of blocks) {
    let want: string
    try {
      want = expected(block, read, format)
    } catch (error) {
      problems.push({ line: block.line, snippet: block.snippet, message: (error as Error).message })
      continue
    }
    if (want !== block.content) {
      const got = block.content.split('\n')
      const first = want.split('\n').findIndex((line, index) => line !== got[index])
      const at = first < 0 ? Math.min(got.length, want.split('\n').length) : first
      problems.push({
        line: block.line,
        snippet: block.snippet,
        message: `differs from its source from the block's line ${at + 1}: README has ${JSON.stringify(got[at] ?? '(nothing)')}, source has ${JSON.stringify(want.split('\n')[at] ?? '(nothing)')}`,
      })
    }
  }
  return problems
}

/**
 * Lines (1-based) of TypeScript code blocks that have no snippet marker: code nothing compiles. Every `ts` block of
 * the READMEs must come from an example file, so that none can silently stop compiling.
 */
export function uncheckedBlocks(markdown: string): number[] {
  const lines = markdown.split('\n')
  const unchecked: number[] = []
  let inside: string | undefined
  lines.forEach((line, index) => {
    const fence = /^(`{3,})(\w*)\s*$/.exec(line.trimEnd())
    if (inside !== undefined) {
      if (line.trimEnd() === inside) inside = undefined
      return
    }
    if (!fence) return
    inside = fence[1]
    const language = fence[2] ?? ''
    const marked = MARKER.test((lines[index - 1] ?? '').trim())
    if (['ts', 'typescript', 'js', 'javascript'].includes(language) && !marked) unchecked.push(index + 1)
  })
  return unchecked
}

/** The snippet markers of one Markdown text, as `path#region`. */
export function listSnippets(markdown: string): string[] {
  return findBlocks(markdown.split('\n')).blocks.map((block) => block.snippet)
}

/** Rewrites every snippet block of one Markdown text from its source; returns the new text. */
export function writeMarkdown(
  markdown: string,
  read: ReadSource = readFromRepo,
  format: (code: string) => string = (code) => formatTypeScript(code),
): string {
  const lines = markdown.split('\n')
  const { blocks, problems } = findBlocks(lines)
  if (problems.length > 0) throw new Error(problems.map((problem) => problem.message).join('\n'))
  for (const block of blocks.reverse()) {
    lines.splice(block.start, block.end - block.start, ...expected(block, read, format).split('\n'))
  }
  return lines.join('\n')
}

function main(): void {
  const write = process.argv.includes('--write')
  let failed = 0
  for (const file of markdownFiles()) {
    const name = relative(REPO_ROOT, file)
    const markdown = readFileSync(file, 'utf8')
    if (write) {
      const updated = writeMarkdown(markdown)
      if (updated !== markdown) {
        writeFileSync(file, updated)
        console.log(`updated ${name}`)
      }
      continue
    }
    for (const problem of checkMarkdown(markdown)) {
      failed += 1
      console.error(`${name}:${problem.line}: ${problem.snippet} ${problem.message}`)
    }
    for (const line of uncheckedBlocks(markdown)) {
      failed += 1
      console.error(`${name}:${line}: a code block without a <!-- snippet: path#region --> marker`)
    }
  }
  if (failed > 0) {
    console.error(`\n${failed} snippet(s) out of step; --write copies marked ones from their sources.`)
    process.exitCode = 1
  }
}

if (process.argv[1] && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) main()
