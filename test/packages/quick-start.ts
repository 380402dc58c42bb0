/**
 * The root README's quick start ("Use it in your own service") as a newcomer copies it: the shell blocks to type and
 * the files to save, read from the README's text, so that the newcomer test runs what the page says and fails when
 * the page stops working — not a copy of it kept in the test.
 */

/** The example database URL the README's `.env` line names; a test puts its own database there. */
export const README_DATABASE_URL = 'postgres://postgres@127.0.0.1:5432/postgres'

/** The consumer's URL the README's commands name (port 3000); a test runs its consumer on a free port. */
export const README_CONSUMER_URL = 'http://127.0.0.1:3000/hooks'

/** The directory the README's install commands name the tarballs in. */
export const README_TARBALL_DIR = './vendor/outbox/'

/** What the README tells a newcomer to type and save, in its order. */
export interface QuickStart {
  /** The block that makes the new project (`npm init -y …`). */
  readonly setup: string
  /** The block of `npm install ./vendor/outbox/…` commands. */
  readonly install: string
  /** The tarball files those commands name (`outbox-producer-0.1.0.tgz`, …), each once. */
  readonly tarballs: readonly string[]
  /** The files to save: the name a heading gives (`producer.ts`) and the code block under it. */
  readonly files: readonly { readonly name: string; readonly code: string }[]
  /** The lines of "Run it" that write `.env`. */
  readonly env: string
  /** The command that runs each file, by file name (`npx tsx --env-file=.env relay.ts`). */
  readonly commands: Readonly<Record<string, string>>
  /** The block that runs the `outbox` CLI instead of `relay.ts`. */
  readonly cli: string
  /** The line that exports `.env` to a shell (`set -a && . ./.env && set +a`), which the curl example asks for. */
  readonly exportEnv: string
  /** The `curl` example. */
  readonly curl: string
}

/** One fenced block: its language, its text, and the nearest heading above it. */
interface Block {
  readonly language: string
  readonly text: string
  readonly heading: string
  /** The line before the fence (a `<!-- snippet: … -->` marker, or prose). */
  readonly before: string
}

const SECTION = '## Use it in your own service'

function blocksOf(markdown: string): Block[] {
  const lines = markdown.split('\n')
  const blocks: Block[] = []
  let heading = ''
  for (let index = 0; index < lines.length; index += 1) {
    const line = lines[index] ?? ''
    if (line.startsWith('#')) heading = line
    const fence = /^(`{3,})(\w*)\s*$/.exec(line)
    if (!fence) continue
    const close = lines.findIndex((other, at) => at > index && other.trimEnd() === fence[1])
    if (close < 0) throw new Error(`the README's code block at line ${index + 1} is never closed`)
    blocks.push({
      language: fence[2] ?? '',
      text: lines.slice(index + 1, close).join('\n'),
      heading,
      before: lines[index - 1] ?? '',
    })
    index = close
  }
  return blocks
}

/** The one block that `matches`, or an error saying what the quick start lacks. */
function only(blocks: readonly Block[], what: string, matches: (block: Block) => boolean): Block {
  const found = blocks.filter(matches)
  if (found.length !== 1) {
    throw new Error(
      `the README's quick start ("${SECTION}") has ${found.length} ${what}, where the newcomer test expects one; ` +
        'if the page changed on purpose, change test/packages/quick-start.ts with it',
    )
  }
  return found[0]!
}

/** Reads the quick start out of the root README's text; throws naming the part it cannot find. */
export function readQuickStart(readme: string): QuickStart {
  const start = readme.indexOf(`\n${SECTION}\n`)
  if (start < 0) throw new Error(`the README has no "${SECTION}" section`)
  const end = readme.indexOf('\n## ', start + SECTION.length + 2)
  const section = readme.slice(start, end < 0 ? undefined : end)
  const blocks = blocksOf(section)
  const shell = blocks.filter((block) => block.language === 'sh')

  const setup = only(shell, 'blocks with `npm init`', (block) => block.text.includes('npm init'))
  const install = only(shell, `blocks of \`npm install ${README_TARBALL_DIR}…\``, (block) =>
    block.text.includes(`npm install ${README_TARBALL_DIR}`),
  )
  const tarballs = [
    ...new Set([...install.text.matchAll(/\.\/vendor\/outbox\/(\S+\.tgz)/g)].map((match) => match[1]!)),
  ]

  const files = blocks
    .filter((block) => block.before.includes('<!-- snippet: examples/orders/snippets/quick-start-'))
    .map((block) => {
      const name = /`([\w-]+\.ts)`\s*$/.exec(block.heading)?.[1]
      if (name === undefined) {
        throw new Error(
          `the quick start's heading "${block.heading}" does not end with the file name to save`,
        )
      }
      return { name, code: `${block.text}\n` }
    })

  const runIt = only(shell, 'blocks that run the files with `npx tsx`', (block) =>
    block.text.includes('npx tsx'),
  )
  const runLines = runIt.text.split('\n')
  const env = runLines.filter((line) => line.includes('.env') && line.startsWith('echo ')).join('\n')
  if (!env.includes(`DATABASE_URL=${README_DATABASE_URL}`) || !env.includes('OUTBOX_SECRET=')) {
    throw new Error(`"Run it" must write DATABASE_URL=${README_DATABASE_URL} and OUTBOX_SECRET to .env`)
  }
  const commands: Record<string, string> = {}
  for (const line of runLines.filter((each) => each.startsWith('npx tsx '))) {
    const file = /\s([\w-]+\.ts)\b/.exec(line)?.[1]
    if (file !== undefined) commands[file] = line
  }

  const cli = only(shell, 'blocks that run `npx outbox relay`', (block) =>
    block.text.includes('npx outbox relay'),
  )
  const exportEnv = cli.text.split('\n')[0] ?? ''
  if (!exportEnv.startsWith('set -a') || !section.includes(`\`${exportEnv.replace(/\s+#.*$/, '')}\``)) {
    throw new Error('the CLI block must start by exporting .env, with the line the curl example names')
  }
  const curl = only(shell, 'blocks that run `curl`', (block) => /^curl /m.test(block.text))

  return {
    setup: setup.text,
    install: install.text,
    tarballs,
    files,
    env,
    commands,
    cli: cli.text,
    exportEnv: exportEnv.replace(/\s+#.*$/, ''),
    curl: curl.text,
  }
}
