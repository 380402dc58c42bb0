/** Reads a required environment variable, or explains which one is missing and what it looks like. */
export function requireEnv(name: string, example: string): string {
  const value = process.env[name]
  if (!value) throw new Error(`${name} is not set, e.g. ${name}=${example}`)
  return value
}

/** Reads a TCP port from the environment (0 asks the kernel for a free one). */
export function portFromEnv(name: string, fallback: number): number {
  const text = process.env[name]
  if (text === undefined || text === '') return fallback
  const port = Number(text)
  if (!Number.isInteger(port) || port < 0 || port > 65_535) {
    throw new Error(`${name} must be a TCP port from 0 to 65535, got ${JSON.stringify(text)}`)
  }
  return port
}
