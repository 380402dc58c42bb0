/**
 * Packs the published packages as a release would: `pnpm pack` applies each manifest's `publishConfig` (which
 * drops the workspace-only `@outbox/source` export condition) and turns `workspace:` ranges into versions. The
 * packed-tarball test and `pnpm check:packages` both start here, so they check exactly what would be published.
 */
import { execFile } from 'node:child_process'
import { createHash } from 'node:crypto'
import { mkdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join, resolve } from 'node:path'
import { fileURLToPath } from 'node:url'
import { promisify } from 'node:util'

const run = promisify(execFile)

/** The repository root. */
export const REPO_ROOT = resolve(fileURLToPath(new URL('../..', import.meta.url)))

/** The directories under `packages/` that are published, dependencies first. */
export const PUBLISHED_PACKAGES = ['protocol', 'producer', 'consumer', 'console'] as const

/** One of {@link PUBLISHED_PACKAGES}. */
export type PublishedPackage = (typeof PUBLISHED_PACKAGES)[number]

/** A package packed into a tarball. */
export interface PackedPackage {
  /** The directory under `packages/`, e.g. `'producer'`. */
  readonly directory: PublishedPackage
  /** The package's name, e.g. `'@outbox/producer'`. */
  readonly name: string
  /** The absolute path of its `.tgz`. */
  readonly tarball: string
}

/** Where pnpm writes a package's tarball: `@outbox/producer` 0.1.0 → `outbox-producer-0.1.0.tgz`. */
function tarballName(name: string, version: string): string {
  return `${name.replace(/^@/, '').replace('/', '-')}-${version}.tgz`
}

/** Whether the process that took a pack lock is gone (or never wrote its pid, long ago): the lock is stale. */
function lockHolderGone(lock: string): boolean {
  let pid: number
  try {
    pid = Number(readFileSync(join(lock, 'pid'), 'utf8'))
  } catch {
    try {
      return Date.now() - statSync(lock).mtimeMs > 60_000
    } catch {
      return true
    }
  }
  try {
    process.kill(pid, 0)
    return false
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === 'ESRCH'
  }
}

/**
 * Runs `pack` while holding this checkout's pack lock (a directory in the temp dir). The packed-package and newcomer
 * tests pack in two test processes at once, and two `prepack` builds of one project at once race on its `dist/`.
 */
async function withPackLock<T>(pack: () => Promise<T>): Promise<T> {
  const key = createHash('sha256').update(REPO_ROOT).digest('hex').slice(0, 16)
  const lock = join(tmpdir(), `outbox-pack-${key}.lock`)
  const deadline = Date.now() + 10 * 60_000
  for (;;) {
    try {
      mkdirSync(lock)
      writeFileSync(join(lock, 'pid'), String(process.pid))
      break
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'EEXIST') throw error
      if (lockHolderGone(lock)) {
        rmSync(lock, { recursive: true, force: true })
        continue
      }
      if (Date.now() > deadline) throw new Error(`another process held ${lock} for 10 minutes`)
      await new Promise((resolve) => setTimeout(resolve, 200))
    }
  }
  try {
    return await pack()
  } finally {
    rmSync(lock, { recursive: true, force: true })
  }
}

/**
 * Packs every published package into `destination` (which must exist) with `pnpm pack`. Its `prepack` script
 * builds `dist/` first, so this works from a fresh clone too.
 */
export async function packPackages(destination: string): Promise<PackedPackage[]> {
  return await withPackLock(() => packEach(destination))
}

async function packEach(destination: string): Promise<PackedPackage[]> {
  const packed: PackedPackage[] = []
  // One at a time: the packages' builds reference each other (`tsc -b`), and two builds of one project at once
  // would race on its output.
  for (const directory of PUBLISHED_PACKAGES) {
    const cwd = join(REPO_ROOT, 'packages', directory)
    const manifest = JSON.parse(readFileSync(join(cwd, 'package.json'), 'utf8')) as {
      name: string
      version: string
    }
    await run('pnpm', ['pack', '--pack-destination', destination], { cwd, maxBuffer: 16 * 1024 * 1024 })
    packed.push({
      directory,
      name: manifest.name,
      tarball: join(destination, tarballName(manifest.name, manifest.version)),
    })
  }
  return packed
}
