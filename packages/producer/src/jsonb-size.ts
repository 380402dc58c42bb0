const QUOTE = 0x22
const BACKSLASH = 0x5c
const COMMA = 0x2c
const COLON = 0x3a
const MINUS = 0x2d
const ZERO = 0x30
const NINE = 0x39

/**
 * The size in bytes of a JSON value as the relay sends it: PostgreSQL's text form of the `jsonb` the value is stored
 * as, computed from its `JSON.stringify` text without a round trip to the database.
 *
 * Why it differs from the input: jsonb prints a space after every `,` and `:` between items, and prints numbers in
 * full decimal notation (`1e300` becomes a 1 followed by 300 zeros, `5e-324` a fraction of 326 characters). Strings
 * print with the same escapes `JSON.stringify` uses, and key order and duplicate keys never make the text longer. So
 * the size of the body the relay sends is this plus the envelope, whatever the payload holds.
 *
 * @param json - the output of `JSON.stringify` (compact, no NUL or lone surrogates: the caller checked them).
 */
export function jsonbTextBytes(json: string): number {
  let extra = 0
  let inString = false
  for (let index = 0; index < json.length; index++) {
    const code = json.charCodeAt(index)
    if (inString) {
      if (code === BACKSLASH) index++
      else if (code === QUOTE) inString = false
      continue
    }
    if (code === QUOTE) inString = true
    else if (code === COMMA || code === COLON) extra += 1
    else if (code === MINUS || (code >= ZERO && code <= NINE)) {
      let end = index + 1
      while (end < json.length && isNumberChar(json.charCodeAt(end))) end++
      const token = json.slice(index, end)
      extra += numericTextLength(token) - token.length
      index = end - 1
    }
  }
  return Buffer.byteLength(json) + extra
}

function isNumberChar(code: number): boolean {
  // digits, '.', 'e', 'E', '+', '-'
  return (
    (code >= ZERO && code <= NINE) ||
    code === 0x2e ||
    code === 0x65 ||
    code === 0x45 ||
    code === 0x2b ||
    code === MINUS
  )
}

/**
 * Length of PostgreSQL's `numeric` output for a JSON number token: the integer part without leading zeros (`0` when
 * there is none), then, when the display scale is positive, a point and that many digits. The scale is the token's
 * fraction digits minus its exponent, as `numeric_in` computes it.
 */
export function numericTextLength(token: string): number {
  const negative = token.startsWith('-')
  const unsigned = negative ? token.slice(1) : token
  const [mantissa = '', exponentText] = unsigned.split(/[eE]/)
  const exponent = exponentText === undefined ? 0 : Number(exponentText)
  const [integerDigits = '', fractionDigits = ''] = mantissa.split('.')
  const digits = integerDigits + fractionDigits
  const scale = Math.max(0, fractionDigits.length - exponent)
  const point = integerDigits.length + exponent
  let integerPart = point <= 0 ? '' : digits.slice(0, point).padEnd(point, '0')
  integerPart = integerPart.replace(/^0+/, '')
  const integerLength = integerPart.length === 0 ? 1 : integerPart.length
  const isZero = !/[1-9]/.test(digits)
  return (negative && !isZero ? 1 : 0) + integerLength + (scale > 0 ? 1 + scale : 0)
}
