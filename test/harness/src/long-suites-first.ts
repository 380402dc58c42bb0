import { BaseSequencer, type TestSpecification } from 'vitest/node'

/**
 * The suites that run longest, longest first, as measured (2 CPUs, the whole run): the chaos soak 125–150 s, the
 * relay's process crashes 66–100 s, the packed-package newcomer and install suites 46–61 s, the model test 35–40 s,
 * the crash loop 20–24 s, network faults 18–22 s, the demo 17 s. Everything else takes 15 s or less.
 */
const LONG_SUITES = [
  'test/chaos/chaos.test.ts',
  'packages/producer/test/relay.crash.test.ts',
  'test/packages/newcomer.test.ts',
  'test/packages/packed.test.ts',
  'test/model/lanes.model.test.ts',
  'packages/producer/test/relay.crash-loop.test.ts',
  'test/chaos/network-faults.test.ts',
  'examples/orders/test/demo.test.ts',
]

function rank(spec: TestSpecification): number {
  const index = LONG_SUITES.findIndex((suite) => spec.moduleId.endsWith(suite))
  return index < 0 ? LONG_SUITES.length : index
}

/**
 * Starts the long suites first, then vitest's own order (its cache of durations where it has one, else larger files
 * first). On a fresh clone vitest has no durations, and a long suite that happened to start last ran alone at the
 * end while the other workers sat idle: the run lasts at least as long as its last file.
 */
export class LongSuitesFirst extends BaseSequencer {
  override async sort(files: TestSpecification[]): Promise<TestSpecification[]> {
    const sorted = await super.sort(files)
    return sorted
      .map((spec, order) => ({ spec, order }))
      .sort((a, b) => rank(a.spec) - rank(b.spec) || a.order - b.order)
      .map(({ spec }) => spec)
  }
}
