// The console's one script, served from <base>/assets/console.js (the CSP allows no inline script).
// Refreshes the page's <main> every data-refresh-ms and draws the two charts with uPlot (loaded before it).
;(() => {
  const body = document.body
  const base = body.dataset.base || ''
  const refreshMs = Number(body.dataset.refreshMs || 0)

  // An operator typing into a form (a filter, a checkbox before a discard) must not lose it to a refresh.
  let editing = false
  document.addEventListener('input', () => {
    editing = true
  })

  async function refreshMain() {
    if (editing || document.hidden) return
    const response = await fetch(location.href, {
      credentials: 'same-origin',
      headers: { Accept: 'text/html' },
    })
    if (!response.ok || response.redirected) return
    const next = new DOMParser().parseFromString(await response.text(), 'text/html').querySelector('main')
    const current = document.querySelector('main')
    if (next && current && !editing) current.replaceWith(next)
  }

  const charts = new Map()

  function draw(id, xs, ys, label) {
    const element = document.getElementById(id)
    if (!element || typeof uPlot === 'undefined') return
    const data = [xs, ys]
    const existing = charts.get(id)
    if (existing) {
      existing.setData(data)
      return
    }
    // Its box's width (420 px at a desk; the screen's on a phone, where console.css lets it shrink).
    const width = Math.max(240, Math.min(720, element.clientWidth || 420))
    charts.set(
      id,
      new uPlot(
        {
          width,
          height: 180,
          series: [{}, { label, stroke: '#2b6cb0', width: 2 }],
          scales: { x: { time: true } },
        },
        data,
        element,
      ),
    )
  }

  async function refreshCharts() {
    if (!document.getElementById('charts')) return
    const [throughput, lag] = await Promise.all([
      fetch(`${base}/api/throughput`, {
        credentials: 'same-origin',
        headers: { Accept: 'application/json' },
      }),
      fetch(`${base}/api/lag`, { credentials: 'same-origin', headers: { Accept: 'application/json' } }),
    ])
    if (throughput.ok) {
      const { buckets } = await throughput.json()
      draw(
        'chart-throughput',
        buckets.map((bucket) => bucket.at / 1000),
        buckets.map((bucket) => bucket.sent),
        'delivered',
      )
    }
    if (lag.ok) {
      const { samples } = await lag.json()
      draw(
        'chart-lag',
        samples.map((sample) => sample.at / 1000),
        samples.map((sample) => sample.lagSeconds),
        'lag (s)',
      )
    }
  }

  function tick() {
    Promise.allSettled([refreshMain(), refreshCharts()]).then(() => {
      body.dataset.refreshed = String(Date.now())
    })
  }

  refreshCharts().then(() => {
    body.dataset.charted = 'true'
  })
  if (refreshMs > 0) setInterval(tick, refreshMs)
})()
