/**
 * The one warning a relay without a signing secret writes, at its first request: the library's relay and the CLI
 * (which shows it even without `--verbose`) say the same words. Unsigned requests let anyone who can reach the
 * subscriber forge events — with a sequence far ahead, one forged event can stall an ordered aggregate for good.
 */
export const UNSIGNED_WARNING =
  'sending webhooks UNSIGNED: no signing secret is set, so the subscriber cannot tell these requests from forged ones; ' +
  'give the relay a secret (option `secret`, or OUTBOX_SECRET / --secret for the CLI) and the subscriber the same one — ' +
  'generate it with: echo "whsec_$(openssl rand -base64 32)"'
