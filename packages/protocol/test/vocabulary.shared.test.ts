import { describe, expect, it } from 'vitest'
import {
  consoleLogger,
  DEFAULT_SCHEMA,
  invalidOption,
  isLogger,
  OutboxError,
  ProtocolError,
  parseDuration,
  parseSigningSecrets,
  resolveSchema,
  silentLogger,
} from '../src/index.js'

function thrown(action: () => unknown): OutboxError {
  try {
    action()
  } catch (error) {
    return error as OutboxError
  }
  throw new Error('expected a throw')
}

describe('OutboxError', () => {
  it('is the one class: ProtocolError is the same class, and protocol errors carry their code', () => {
    expect(ProtocolError).toBe(OutboxError)
    const error = thrown(() => parseSigningSecrets('not-a-secret'))
    expect(error).toBeInstanceOf(OutboxError)
    expect(error.name).toBe('OutboxError')
    expect(error.code).toBe('ERR_OUTBOX_INVALID_SECRET')
  })

  it('an option error names its option and can be written with other names and the value as typed', () => {
    const error = invalidOption(
      'batchSize',
      0,
      (name, got) => `${name('batchSize')} must be below ${name('leaseMs')}, got ${got}`,
      new Error('root'),
    )
    expect(error.code).toBe('ERR_OUTBOX_INVALID_OPTION')
    expect(error.option).toBe('batchSize')
    expect(error.message).toBe('batchSize must be below leaseMs, got 0')
    expect((error.cause as Error).message).toBe('root')
    expect(error.describe((option) => `--${option}`, '"0"')).toBe(
      '--batchSize must be below --leaseMs, got "0"',
    )
    expect(invalidOption('name', 'x', (name, got) => `${name('name')}: ${got}`).message).toBe('name: "x"')
  })

  it('a plain error describes itself as its message', () => {
    const error = new OutboxError('ERR_OUTBOX_INVALID_EVENT', 'no type', { option: 'eventType' })
    expect(error.option).toBe('eventType')
    expect(error.describe((option) => `--${option}`)).toBe('no type')
  })
})

describe('parseDuration', () => {
  it('reads ms s m h d w, decimals and plain milliseconds', () => {
    expect(parseDuration(1500, 'x')).toBe(1500)
    expect(parseDuration('500ms', 'x')).toBe(500)
    expect(parseDuration('90s', 'x')).toBe(90_000)
    expect(parseDuration('15m', 'x')).toBe(900_000)
    expect(parseDuration('1.5h', 'x')).toBe(5_400_000)
    expect(parseDuration('30d', 'x')).toBe(2_592_000_000)
    expect(parseDuration('2w', 'x')).toBe(1_209_600_000)
  })

  it('refuses anything else with an option error naming the option', () => {
    const error = thrown(() => parseDuration('soon', 'retention'))
    expect(error.code).toBe('ERR_OUTBOX_INVALID_OPTION')
    expect(error.option).toBe('retention')
    expect(error.message).toMatch(/^retention must be .*got "soon"$/)
    expect(thrown(() => parseDuration(-1, 'pauseMs')).option).toBe('pauseMs')
  })
})

describe('resolveSchema', () => {
  it("defaults to 'public' and accepts lower-case identifiers only", () => {
    expect(DEFAULT_SCHEMA).toBe('public')
    expect(resolveSchema(undefined)).toBe('public')
    expect(resolveSchema('tenant_1')).toBe('tenant_1')
    for (const bad of ['Webhooks', 'we"ird', '', '1abc', 'a'.repeat(64)]) {
      const error = thrown(() => resolveSchema(bad))
      expect(error.code).toBe('ERR_OUTBOX_INVALID_OPTION')
      expect(error.option).toBe('schema')
    }
  })
})

describe('Logger', () => {
  it('stock loggers have the four methods in pino order, and isLogger recognises them', () => {
    expect(isLogger(consoleLogger)).toBe(true)
    expect(isLogger(silentLogger)).toBe(true)
    expect(isLogger({ info: () => {} })).toBe(false)
    expect(() => silentLogger.error({ code: 'x' }, 'never printed')).not.toThrow()
  })
})
