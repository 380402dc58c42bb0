// The root README as a map of the repository: a reader finds every published package in its Layout table and the
// operations files (deploy/) where running the thing is explained, and every link there leads somewhere.
import { existsSync, readdirSync, readFileSync } from 'node:fs'
import { join, resolve } from 'node:path'
import { fileURLToPath } from 'node:url'
import { describe, expect, it } from 'vitest'

const ROOT = resolve(fileURLToPath(new URL('../..', import.meta.url)))
const README = readFileSync(join(ROOT, 'README.md'), 'utf8')

/** The text of a `## ` section, up to the next one. */
function section(title: string): string {
  const start = README.indexOf(`\n## ${title}\n`)
  expect(start, `## ${title}`).toBeGreaterThanOrEqual(0)
  const end = README.indexOf('\n## ', start + 1)
  return README.slice(start, end < 0 ? undefined : end)
}

/** Relative link targets of Markdown text, without their #anchor; a link's text may span lines. */
function relativeLinks(markdown: string): string[] {
  return [...markdown.matchAll(/\]\(([^)\s]+)\)/g)]
    .map((match) => match[1]!)
    .filter((target) => !/^(https?:|mailto:|#)/.test(target))
    .map((target) => target.split('#')[0]!)
}

/** The packages under packages/ that would be published, by name and folder. */
function publishedPackages(): { name: string; folder: string }[] {
  return readdirSync(join(ROOT, 'packages'), { withFileTypes: true })
    .filter((entry) => entry.isDirectory() && existsSync(join(ROOT, 'packages', entry.name, 'package.json')))
    .map((entry) => {
      const manifest = JSON.parse(readFileSync(join(ROOT, 'packages', entry.name, 'package.json'), 'utf8'))
      return {
        name: manifest.name as string,
        folder: `packages/${entry.name}`,
        private: manifest.private === true,
      }
    })
    .filter((pkg) => !pkg.private)
}

describe('the root README', () => {
  it('has a row in its Layout table for every published package, linked to its folder', () => {
    const rows = section('Layout')
      .split('\n')
      .filter((line) => line.startsWith('| '))
    const packages = publishedPackages()
    expect(packages.map((pkg) => pkg.name)).toContain('@outbox/console')
    for (const { name, folder } of packages) {
      expect(
        rows.some((row) => row.startsWith(`| [\`${name}\`](${folder})`)),
        `${name} in the Layout table`,
      ).toBe(true)
    }
  })

  it('points to deploy/ in Operate it and in Layout, with a link to each operations file or folder in it', () => {
    const operate = section('Operate it')
    const entries = readdirSync(join(ROOT, 'deploy'))
    expect(entries).toEqual(expect.arrayContaining(['Dockerfile', 'kubernetes', 'relay']))
    const linked = relativeLinks(operate)
    expect(linked).toContain('deploy')
    for (const entry of entries) {
      expect(
        linked.some((target) => target === `deploy/${entry}` || target.startsWith(`deploy/${entry}/`)),
        `deploy/${entry} linked from Operate it`,
      ).toBe(true)
    }
    expect(relativeLinks(section('Layout'))).toContain('deploy')
  })

  it('links only to files and folders that exist', () => {
    const missing = relativeLinks(README).filter((target) => !existsSync(join(ROOT, target)))
    expect(missing).toEqual([])
  })
})
