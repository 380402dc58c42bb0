/**
 * `pnpm check:packages`: packs every published package as a release would and runs publint and attw on the
 * tarballs. Exits 1 if either reports a problem (attw's one accepted rule is listed in `lint-tarball.ts`).
 */
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { ATTW_IGNORED_RULES, lintTarball } from './lint-tarball.js'
import { packPackages } from './pack.js'

const destination = mkdtempSync(join(tmpdir(), 'outbox-check-packages-'))
try {
  let failed = 0
  for (const { name, tarball } of await packPackages(destination)) {
    for (const report of await lintTarball(tarball)) {
      console.log(`==> ${report.tool} ${name}: ${report.ok ? 'ok' : 'PROBLEMS'}`)
      if (!report.ok) {
        failed += 1
        console.log(report.output.trimEnd())
      }
    }
  }
  console.log(
    failed === 0
      ? `All packages clean (attw ignores: ${ATTW_IGNORED_RULES.join(', ')}).`
      : `${failed} report(s) with problems.`,
  )
  process.exitCode = failed === 0 ? 0 : 1
} finally {
  rmSync(destination, { recursive: true, force: true })
}
