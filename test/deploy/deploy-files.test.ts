/**
 * The operations files under deploy/ against what `outbox relay` really serves: a live relay started with the
 * Kubernetes container's flags and environment is scraped and probed, and every metric the alert rules and the
 * dashboard name must exist in that scrape; the probes, ports and flags of the Deployment, the Dockerfile and the
 * systemd unit must match the CLI. No image is built and no manifest applied (no container daemon or cluster here);
 * `promtool check rules` and `systemd-analyze verify` run where they are installed.
 */
import { execFile, execFileSync } from 'node:child_process'
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { promisify } from 'node:util'
import { migrate } from '@outbox/producer'
import { parseDuration } from '@outbox/protocol'
import { freePort, startSink, useTestDatabase } from '@outbox/test-harness'
import { beforeAll, describe, expect, it } from 'vitest'
import { parse, parseAllDocuments } from 'yaml'
import { buildCli, CLI_PATH, cliEnv, runCli, startCli } from '../../packages/producer/test/cli-process.js'

const run = promisify(execFile)
const DEPLOY = fileURLToPath(new URL('../../deploy/', import.meta.url))
const read = (path: string) => readFileSync(join(DEPLOY, path), 'utf8')

const t = useTestDatabase()

beforeAll(() => buildCli(), 120_000)

/** True when `command` is on PATH. */
function installed(command: string): boolean {
  try {
    execFileSync('sh', ['-c', `command -v ${command}`], { stdio: 'ignore' })
    return true
  } catch {
    return false
  }
}

/** Metric names a PromQL expression refers to (label names, functions and keywords are not metric-shaped). */
function metricNames(expr: string): string[] {
  const withoutLabels = expr.replace(/\{[^}]*\}/g, '{}').replace(/\bby \([^)]*\)/g, '')
  return [...withoutLabels.matchAll(/\b(outbox_[a-z0-9_]+|process_[a-z0-9_]+|nodejs_[a-z0-9_]+|up)\b/g)].map(
    (match) => match[1]!,
  )
}

/** Every series name a scrape can hold: each family, and a histogram's _bucket, _sum and _count. */
function scrapedNames(text: string): Set<string> {
  const names = new Set<string>()
  for (const [, name, type] of text.matchAll(/^# TYPE (\S+) (\S+)$/gm)) {
    names.add(name!)
    if (type === 'histogram' || type === 'summary')
      for (const suffix of ['_bucket', '_sum', '_count']) names.add(`${name}${suffix}`)
  }
  return names
}

/** A flag's value in an argument list. */
function flagValue(args: readonly string[], flag: string): string | undefined {
  const index = args.indexOf(flag)
  return index === -1 ? undefined : args[index + 1]
}

const deployment = parse(read('kubernetes/deployment.yaml'))
const container = deployment.spec.template.spec.containers[0]
const alertExprs: string[] = parse(read('prometheus/alerts.yml')).groups.flatMap(
  (group: { rules: { expr: string }[] }) => group.rules.map((rule) => rule.expr),
)
const dashboardExprs: string[] = JSON.parse(read('grafana/outbox-dashboard.json')).panels.flatMap(
  (panel: { targets: { expr: string }[] }) => panel.targets.map((target) => target.expr),
)
const dockerfile = read('Dockerfile')
const unit = read('systemd/outbox-relay.service')
/** The relay arguments of the systemd unit's ExecStart (after `relay`). */
const unitArgs = /^ExecStart=.* relay (.*)$/m.exec(unit)![1]!.split(/\s+/)
/** The Dockerfile's CMD (the relay's arguments; ENTRYPOINT runs `relay`). */
const dockerArgs: string[] = JSON.parse(/^CMD (\[.*\])$/m.exec(dockerfile)![1]!)

describe('deploy/: operations files against the live relay', () => {
  it('a relay started as the Deployment starts it serves every metric the alerts and the dashboard name, and its probes', async ({
    onTestFinished,
  }) => {
    const sink = await startSink()
    onTestFinished(() => sink.close())
    const schema = 'deploy_files'
    await migrate(t.db, { schema })
    const dir = mkdtempSync(join(tmpdir(), 'outbox-deploy-'))
    const files: Record<string, string> = {
      '/var/run/secrets/outbox/database-url': join(dir, 'database-url'),
      '/var/run/secrets/outbox/signing-secrets': join(dir, 'signing-secrets'),
    }
    writeFileSync(files['/var/run/secrets/outbox/database-url']!, `${t.url}\n`)
    writeFileSync(
      files['/var/run/secrets/outbox/signing-secrets']!,
      'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\n',
    )
    // The container's environment, with the mounted Secret's paths moved here and the endpoint at a local sink.
    const env: Record<string, string> = { OUTBOX_SCHEMA: schema }
    for (const { name, value } of container.env as { name: string; value: string }[])
      env[name] = files[value] ?? (name === 'OUTBOX_ENDPOINT' ? sink.url : value)
    // The container's own flags; only the port is a free one (tests run side by side).
    const port = await freePort()
    const args = [...(container.args as string[])]
    args[args.indexOf('--metrics-port') + 1] = String(port)
    const relay = startCli(['relay', ...args], cliEnv(env), { onTestFinished })
    await relay.waitFor(() => /"msg":"serving metrics and probes"/.test(relay.stdout()), 'the metrics port')

    const get = (path: string) => fetch(`http://127.0.0.1:${port}${path}`)
    for (const probe of [container.livenessProbe, container.readinessProbe]) {
      await expect.poll(async () => (await get(probe.httpGet.path)).status, { timeout: 15_000 }).toBe(200)
    }
    // The Dockerfile's HEALTHCHECK command, run as is (but for the port).
    const healthcheck: string[] = JSON.parse(/CMD (\["node", "-e", .*\])$/m.exec(dockerfile)![1]!)
    const script = healthcheck[2]!.replace('127.0.0.1:9464', `127.0.0.1:${port}`)
    await run(process.execPath, ['-e', script])

    const scrape = await (await get('/metrics')).text()
    const names = scrapedNames(scrape)
    const referenced = new Set([...alertExprs, ...dashboardExprs].flatMap(metricNames))
    expect(referenced.size).toBeGreaterThan(10)
    // `up` is the series Prometheus writes for every target; everything else must come from the relay.
    const missing = [...referenced].filter((name) => name !== 'up' && !names.has(name))
    expect(missing, `named in deploy/ but absent from the scrape:\n${scrape}`).toEqual([])
    for (const name of [
      'outbox_relay_ready',
      'outbox_lag_seconds',
      'outbox_request_duration_seconds',
      'outbox_disabled_subscriptions',
      'outbox_subscription_oldest_due_seconds',
    ])
      expect(referenced.has(name) || referenced.has(`${name}_bucket`), name).toBe(true)
    expect((await relay.stop('SIGTERM')).code).toBe(0)
  })

  it('alerts on an auto-disabled subscription and on a subscription whose oldest due event is old, with metrics the producer README documents', () => {
    const rules: { alert: string; expr: string }[] = parse(read('prometheus/alerts.yml')).groups.flatMap(
      (group: { rules: { alert: string; expr: string }[] }) => group.rules,
    )
    const exprOf = (alert: string) => rules.find((rule) => rule.alert === alert)?.expr ?? ''
    expect(metricNames(exprOf('OutboxSubscriptionAutoDisabled'))).toEqual(['outbox_disabled_subscriptions'])
    expect(exprOf('OutboxSubscriptionAutoDisabled')).toContain('reason="gone"')
    expect(metricNames(exprOf('OutboxSubscriptionOldestDueHigh'))).toEqual([
      'outbox_subscription_oldest_due_seconds',
    ])
    expect(exprOf('OutboxSubscriptionOldestDueHigh')).toMatch(/by \(subscription\)/)
    // Every relay metric deploy/ names is one an operator can look up.
    const readme = readFileSync(new URL('../../packages/producer/README.md', import.meta.url), 'utf8')
    const undocumented = [...new Set([...alertExprs, ...dashboardExprs].flatMap(metricNames))]
      .filter((name) => name.startsWith('outbox_'))
      .map((name) => name.replace(/_(bucket|sum|count)$/, ''))
      .filter((name) => !readme.includes(`\`${name}`))
    expect(undocumented).toEqual([])
  })

  it('the Deployment, the Dockerfile and the systemd unit agree with the CLI: port, probe paths, flags, stop timeout', async () => {
    const port = Number(flagValue(container.args, '--metrics-port'))
    const named = container.ports.find((entry: { name: string }) => entry.name === 'metrics')
    expect(named.containerPort).toBe(port)
    expect(container.livenessProbe.httpGet).toEqual({ path: '/healthz', port: 'metrics' })
    expect(container.readinessProbe.httpGet).toEqual({ path: '/readyz', port: 'metrics' })
    const annotations = deployment.spec.template.metadata.annotations
    expect([annotations['prometheus.io/port'], annotations['prometheus.io/path']]).toEqual([
      String(port),
      '/metrics',
    ])
    // The kubelet's SIGKILL and systemd's must come after the drain.
    const stopSeconds = parseDuration(flagValue(container.args, '--stop-timeout')!, '--stop-timeout') / 1000
    expect(deployment.spec.template.spec.terminationGracePeriodSeconds).toBeGreaterThan(stopSeconds)
    expect(Number(/^TimeoutStopSec=(\d+)$/m.exec(unit)![1])).toBeGreaterThan(
      parseDuration(flagValue(unitArgs, '--stop-timeout')!, '--stop-timeout') / 1000,
    )
    expect(unit).toMatch(/^EnvironmentFile=/m)
    expect(unit).toMatch(/^Restart=on-failure$/m)
    // The Secret arrives as files the CLI reads, never as a flag.
    expect(container.env.map((entry: { name: string }) => entry.name)).toEqual(
      expect.arrayContaining(['DATABASE_URL_FILE', 'OUTBOX_SECRET_FILE']),
    )
    // The image exposes and checks the port its CMD serves; it runs as a non-root user.
    expect(Number(flagValue(dockerArgs, '--metrics-port'))).toBe(port)
    expect(dockerfile).toMatch(new RegExp(`^EXPOSE ${port}$`, 'm'))
    expect(dockerfile).toMatch(new RegExp(`^HEALTHCHECK .*\\n.*http://127\\.0\\.0\\.1:${port}/healthz`, 'm'))
    expect(dockerfile).toMatch(/^USER (?!root)\S+$/m)
    expect(dockerfile).toMatch(
      /^ENTRYPOINT \["node", "\/app\/node_modules\/@outbox\/producer\/dist\/cli\.js", "relay"\]$/m,
    )
    // Every flag the three files pass is one `outbox relay` knows.
    const help = (await runCli(['relay', '--help'], cliEnv())).stdout
    for (const flag of [...container.args, ...dockerArgs, ...unitArgs].filter((arg: string) =>
      arg.startsWith('--'),
    ))
      expect(help, flag).toContain(`${flag} `)
    // The PodDisruptionBudget selects the Deployment's pods.
    const [budget] = parseAllDocuments(read('kubernetes/pod-disruption-budget.yaml')).map((doc) =>
      doc.toJSON(),
    )
    expect(budget.kind).toBe('PodDisruptionBudget')
    expect(budget.spec.selector.matchLabels).toEqual(deployment.spec.selector.matchLabels)
    expect(CLI_PATH).toMatch(/dist\/cli\.js$/)
  })

  it('promtool checks the alert rules and systemd-analyze the unit, where they are installed', async () => {
    if (installed('promtool')) {
      const { stdout } = await run('promtool', ['check', 'rules', join(DEPLOY, 'prometheus/alerts.yml')])
      expect(stdout).toMatch(/SUCCESS/)
    } else
      console.log('promtool is not installed (Debian: apt-get install prometheus): rules not checked by it')
    if (installed('systemd-analyze')) {
      await run('systemd-analyze', ['verify', join(DEPLOY, 'systemd/outbox-relay.service')])
    } else console.log('systemd-analyze is not installed: the unit is not verified by it')
    // Whatever is installed, the rules parse and each has an expression and a severity.
    for (const group of parse(read('prometheus/alerts.yml')).groups)
      for (const rule of group.rules)
        expect([rule.alert, rule.expr, rule.labels.severity].every(Boolean)).toBe(true)
  })
})
