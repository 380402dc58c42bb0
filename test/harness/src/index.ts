export { openKysely, type TestDatabase, useTestDatabase, withDatabase } from './database.js'
export {
  type EmbeddedVersion,
  type RunningPostgres,
  type StartPostgresOptions,
  startPostgres,
} from './embedded-postgres.js'
export {
  type EndlessAnswer,
  type EndlessEndpoint,
  type EndlessEndpointOptions,
  startEndlessEndpoint,
} from './endless-endpoint.js'
export { CHROMIUM_PATHS, findChromium } from './find-chromium.js'
export { freePort } from './free-port.js'
export {
  type Availability,
  REQUIRE_ALL_VARIABLE,
  REQUIREMENT_NOTE_PREFIX,
  type Requirement,
  requires,
} from './requirement.js'
export { type Sink, type SinkAnswer, type SinkRequest, startSink } from './sink.js'
