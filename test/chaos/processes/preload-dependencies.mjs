// Loaded with --import BEFORE tsx's loader: third-party packages load here at native speed, and only the project's
// TypeScript goes through the loader's hooks afterwards (the modules are cached, so the TypeScript side gets the
// very same instances). Every chaos process restart pays this startup; through the hooks it costs about 1 s of
// CPU more per process, which on a two-core machine slows the whole run down.
await Promise.all([
  import('kysely'),
  import('pg'),
  import('undici'),
  import('express'),
  import('standardwebhooks'),
])
