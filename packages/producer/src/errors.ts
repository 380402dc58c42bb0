// The one error class and code list live in @outbox/protocol, shared by every package.
export {
  invalidOption,
  type OptionMessage,
  OutboxError,
  type OutboxErrorCode,
} from '@outbox/protocol'
