// One logger type for every package and the CLI, defined in @outbox/protocol.
export { consoleLogger, isLogger, type Logger, type LogMethod, silentLogger } from '@outbox/protocol'
