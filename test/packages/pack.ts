/**
 * Packs the published packages as a release would: `pnpm pack` applies each manifest's `publishConfig` (which
 * drops the workspace-only `@outbox/source` export condition) and turns `workspace:` ranges into versions. The
 * packed-tarball test and `pnpm check:packages` both start here, so they check exactly what would be published.
 */
import { execFile } from 'node:child_process'
import { readFileSync } from 'node:fs'
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

/**
 * Packs every published package into `destination` (which must exist) with `pnpm pack`. Its `prepack` script
 * builds `dist/` first, so this works from a fresh clone too.
 */
export async function packPackages(destination: string): Promise<PackedPackage[]> {
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
