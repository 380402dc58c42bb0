// One duration parser for every package and the CLI, defined in @outbox/protocol.
export { type Duration, parseDuration } from '@outbox/protocol'
