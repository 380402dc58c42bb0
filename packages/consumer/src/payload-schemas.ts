// Placeholder with the agreed signature; replaced by the Standard Schema implementation.
export type PayloadSchemas = Readonly<Record<string, unknown>>
export async function validatePayload(
  _schemas: PayloadSchemas,
  _type: string,
  data: unknown,
): Promise<{ ok: true; data: unknown } | { ok: false; issues: string[] }> {
  return { ok: true, data }
}
export function checkPayloadSchemas(value: unknown, _where: string): PayloadSchemas | undefined {
  return value as PayloadSchemas | undefined
}
