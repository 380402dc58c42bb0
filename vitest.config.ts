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
    pool: 'forks',
    testTimeout: 30_000,
    hookTimeout: 60_000,
    teardownTimeout: 30_000,
  },
})
