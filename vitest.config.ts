import { availableParallelism } from 'node:os'
import { defaultServerConditions } from 'vite'
import { defineConfig } from 'vitest/config'
import { LongSuitesFirst } from './test/harness/src/long-suites-first.js'

export default defineConfig({
  // Run the packages from source: the `@outbox/source` export condition points at src/*.ts. Without the bundlers'
  // `module` condition, which Node never uses: vitest hands these conditions to its Node workers, where `module`
  // picked @opentelemetry/api's ESM build (extensionless imports Node cannot load) even for a `require()`.
  ssr: {
    resolve: {
      conditions: [
        '@outbox/source',
        ...defaultServerConditions.filter((condition) => condition !== 'module'),
      ],
    },
  },
  resolve: { conditions: ['@outbox/source'] },
  test: {
    include: [
      'packages/*/test/**/*.test.ts',
      'test/**/*.test.ts',
      'examples/*/test/**/*.test.ts',
      'bench/test/**/*.test.ts',
    ],
    globalSetup: ['./vitest.global-setup.ts'],
    // After the summary, one line per suite skipped for something the machine lacks (see `requires`).
    reporters: ['default', './test/harness/src/requirement-reporter.ts'],
    pool: 'forks',
    // One test file more than there are CPUs, not vitest's default of one fewer: the suites spend most of their time
    // waiting on PostgreSQL, HTTP and leases. Measured on a 2-CPU machine: the default ran every file one after
    // another; two at a time ran 745 s of test time in 446 s, three at a time 915 s in 373 s. Every file has its own
    // database and ports.
    maxWorkers: availableParallelism() + 1,
    sequence: { sequencer: LongSuitesFirst },
    // Ceilings against hangs, not verdicts: a test waits on conditions, and a loaded machine only makes it slower.
    testTimeout: 120_000,
    hookTimeout: 120_000,
    teardownTimeout: 30_000,
  },
})
