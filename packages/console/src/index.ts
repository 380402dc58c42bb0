export { type Authenticated, SESSION_COOKIE, TOKEN_ACTOR } from './auth.js'
export { CONSOLE_CSP_DIRECTIVES, createConsole, type OutboxConsole } from './create-console.js'
export { CSRF_FIELD } from './csrf.js'
export { FLASH_PARAM } from './flash.js'
export { escapeHtml, html, SafeHtml } from './html.js'
export { LAG_SAMPLES, type LagSample } from './lag-sampler.js'
export {
  type ConsoleOptions,
  type ConsoleToken,
  type ConsoleUser,
  DEFAULT_REFRESH_MS,
  DEFAULT_STATEMENT_TIMEOUT_MS,
  type ResolvedConsoleOptions,
} from './options.js'
export { MIN_TOKEN_DISTINCT, MIN_TOKEN_LENGTH, tokenWeakness } from './token-rule.js'
