/**
 * Runs publint and "Are the Types Wrong?" (attw) on one packed tarball, as `pnpm check:packages` and the
 * packed-tarball test do.
 */
import { execFile } from 'node:child_process'
import { join } from 'node:path'
import { promisify } from 'node:util'
import { REPO_ROOT } from './pack.js'

const run = promisify(execFile)

/**
 * The attw rules not enforced, each with the reason it is acceptable.
 *
 * `cjs-resolves-to-esm`: the packages are ESM only, on purpose, and `require()` loads them on every Node.js
 * version `engines` allows (≥ 22.12, where `require(esm)` is on by default; the newcomer test proves it on the
 * oldest and newest supported Node.js).
 * attw 0.18 judges with TypeScript 5.6, whose `module: node16` rejects a `require` of ESM; TypeScript 5.8+ with
 * `module: nodenext` (or `node20`) accepts it, as the packed-tarball test checks on a `.cts` file.
 */
export const ATTW_IGNORED_RULES = ['cjs-resolves-to-esm'] as const

/** What one linter said about one tarball. */
export interface LintReport {
  readonly tool: 'publint' | 'attw'
  readonly ok: boolean
  readonly output: string
}

async function runTool(
  tool: LintReport['tool'],
  args: readonly string[],
): Promise<{ ok: boolean; output: string }> {
  const bin = join(REPO_ROOT, 'node_modules', '.bin', tool)
  try {
    const { stdout, stderr } = await run(bin, [...args], {
      cwd: REPO_ROOT,
      env: { ...process.env, FORCE_COLOR: '0', NO_COLOR: '1' },
      maxBuffer: 16 * 1024 * 1024,
    })
    return { ok: true, output: `${stdout}${stderr}` }
  } catch (error) {
    const failed = error as { stdout?: string; stderr?: string; message: string }
    return { ok: false, output: `${failed.stdout ?? ''}${failed.stderr ?? failed.message}` }
  }
}

/**
 * publint with `--strict` (its warnings fail too) and attw without {@link ATTW_IGNORED_RULES}. A report is `ok`
 * only when the tool exits 0 and, for publint, also has no suggestion left.
 */
export async function lintTarball(tarball: string): Promise<LintReport[]> {
  const publint = await runTool('publint', ['run', tarball, '--strict'])
  const attw = await runTool('attw', [
    tarball,
    '--format',
    'ascii',
    '--no-emoji',
    '--ignore-rules',
    ...ATTW_IGNORED_RULES,
  ])
  return [
    { tool: 'publint', ok: publint.ok && publint.output.includes('All good!'), output: publint.output },
    { tool: 'attw', ok: attw.ok, output: attw.output },
  ]
}
