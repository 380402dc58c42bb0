import { defaultServerConditions } from 'vite'
import { defineConfig } from 'vitest/config'

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
    // One test file per CPU, not vitest's default of one fewer: the suites spend most of their time waiting on
    // PostgreSQL, HTTP and leases, and on two CPUs the default ran every file one after another (measured on such a
    // machine: 667 s of test time in 414 s with two files at a time). Every file has its own database and ports.
    maxWorkers: '100%',
    // Ceilings against hangs, not verdicts: a test waits on conditions, and a loaded machine only makes it slower.
    testTimeout: 120_000,
    hookTimeout: 120_000,
    teardownTimeout: 30_000,
  },
})
