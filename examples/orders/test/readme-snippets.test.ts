import { readFileSync } from 'node:fs'
import { join, relative } from 'node:path'
import { describe, expect, it } from 'vitest'
import {
  checkMarkdown,
  extractRegion,
  listSnippets,
  markdownFiles,
  REPO_ROOT,
  uncheckedBlocks,
  writeMarkdown,
} from '../scripts/readme-snippets.js'

describe('README snippets', () => {
  it('every snippet in the READMEs is its example region, as Biome formats it', () => {
    const problems = markdownFiles().flatMap((file) =>
      checkMarkdown(readFileSync(file, 'utf8')).map(
        (problem) => `${relative(REPO_ROOT, file)}:${problem.line} ${problem.snippet}: ${problem.message}`,
      ),
    )
    expect(problems).toEqual([])
  })

  it('every TypeScript block in the READMEs comes from an example file', () => {
    const unchecked = markdownFiles().flatMap((file) =>
      uncheckedBlocks(readFileSync(file, 'utf8')).map((line) => `${relative(REPO_ROOT, file)}:${line}`),
    )
    expect(unchecked).toEqual([])
    expect(uncheckedBlocks(['```ts', 'const a = 1', '```', '```sh', 'pnpm demo', '```'].join('\n'))).toEqual([
      1,
    ])
  })

  it('the root README shows the producer, relay and consumer code from the example', () => {
    expect(listSnippets(readFileSync(join(REPO_ROOT, 'README.md'), 'utf8'))).toEqual(
      expect.arrayContaining([
        'examples/orders/src/orders-service.ts#create-order',
        'examples/orders/src/relay.ts#relay',
        'examples/orders/src/subscriber.ts#consumer',
      ]),
    )
  })

  it('catches a snippet that drifted from its source, and a marker whose region is gone', () => {
    const source = [
      'function f() {',
      '  // #region demo',
      '  const answer = 42',
      '  // #endregion demo',
      '}',
    ].join('\n')
    const read = () => source
    const same = (code: string) => code
    const markdown = (code: string) =>
      ['# Title', '', '<!-- snippet: a.ts#demo -->', '```ts', code, '```', ''].join('\n')

    expect(extractRegion(source, 'demo')).toBe('const answer = 42')
    expect(checkMarkdown(markdown('const answer = 42'), read, same)).toEqual([])
    expect(checkMarkdown(markdown('const answer = 41'), read, same)).toMatchObject([
      { line: 3, snippet: 'a.ts#demo', message: expect.stringContaining('differs from its source') },
    ])
    expect(checkMarkdown(markdown('x').replace('#demo', '#gone'), read, same)).toMatchObject([
      { message: expect.stringContaining('no region "gone"') },
    ])
    expect(writeMarkdown(markdown('const answer = 41'), read, same)).toBe(markdown('const answer = 42'))
  })
})
