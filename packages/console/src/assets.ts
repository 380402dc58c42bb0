import { readFileSync } from 'node:fs'
import { createRequire } from 'node:module'
import { fileURLToPath } from 'node:url'

/** A static file the console serves: its bytes, read once, and its content type. */
export interface Asset {
  readonly body: Buffer
  readonly type: string
}

/**
 * The console's static files, read once at creation: its own script and style (in `assets/`, beside `src/` and
 * `dist/`), and uPlot's from the installed package — never a CDN, so the console works on a network with no way
 * out, and the CSP can stay `'self'`.
 */
export function loadAssets(): ReadonlyMap<string, Asset> {
  const own = (name: string) => readFileSync(fileURLToPath(new URL(`../assets/${name}`, import.meta.url)))
  const require = createRequire(import.meta.url)
  const uplot = (path: string) => readFileSync(require.resolve(`uplot/dist/${path}`))
  const js = 'text/javascript; charset=utf-8'
  const css = 'text/css; charset=utf-8'
  return new Map([
    ['console.js', { body: own('console.js'), type: js }],
    ['console.css', { body: own('console.css'), type: css }],
    ['uplot.js', { body: uplot('uPlot.iife.min.js'), type: js }],
    ['uplot.css', { body: uplot('uPlot.min.css'), type: css }],
  ])
}
