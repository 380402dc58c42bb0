import { describeFrozenMigrations } from '@outbox/test-harness/frozen-migrations'
import { producerMigrations } from '../src/migrations/index.js'

/**
 * sha256 of each merged migration's text for the harness's fixed schema name. A change is a new migration, with its
 * own line here; editing a merged one fails with "migrations are frozen once merged".
 */
const FROZEN: Readonly<Record<string, string>> = {
  '0001_outbox': 'fe4865beed5282315503afe09dd41bd96c36ee6511ea96f8cd2ab20c9482d2ee',
  '0002_lane_claim_token': '1e6793cbce5109a63697ceabeb7b26caaf0f6217e4aa3ced17b067e23c9c5d41',
  '0003_enqueue_function': '48be68e316338478040741ee90bf4a7fd2fcf5630c47eaaa669c98351e6e963c',
  '0004_claim_function': '7f066d5bf9c5a160edc0e4dfeafca2d0577ddde009a5783612874497a0093820',
  '0005_enqueue_inline': 'a6b2bc7ffb19f0f4454e9240e3b1c3897c59e2fc77d24f8e8eb395b2a62073c8',
  '0006_claim_hashed_busy': 'ed9f8f8ec2877e5a51faa14ea1dc3ac380e3a756bb33d2534a267ec215d329a3',
  '0007_liveness': '0f30b65a2bfc98097677db6bc16176564aba56b665050f9dc0f643105f4af078',
  '0008_subscriptions': '7258beb031d01591d249eb114caa298b9f1e922fc967cb49f06aa2f604cc1056',
  '0009_endpoint_health': '4731eb154c731f8f372ba0e53ecdd3736e2884c1ccfcb4fe04b605e4badaf18b',
  '0010_delivery_log': '7e47565c66d9bb0671426e3ae755e31000d49b63aaad812e95153b3d5de9c037',
  '0011_audit': '9c5c0782c451505faa168bb9c3cfb852a2fe5222ba9229e070e1d0e8883fe58d',
  '0012_rate_limit': 'd96bc53c1a3c01298f07c462eb033ba27bc6eda8e87cf8bd405e334f21956a00',
  '0013_disabled_retention': 'fc18151974ec64ee7facea85389c39dddd39b5eb0291abe71fdae3b375faaff3',
  '0014_backfill': 'b8d1825f91b776eb73df3ff93fd3a554fcd9664b5762ec99619d6c8f87c87cbe',
  '0015_trace_context': 'fb365a9613c6e01783c887f886b23b997bcf2eaac0940a5bfbd1bd8d0f8e10a3',
  '0016_backfill_every_holder': '780e7393dd6d7aa097ebffeb641f53dbeebd66b37dbdb236cb03fc0417ddb980',
  '0017_single_subscription_claim': '59aaec9e532ae968dd26dc8057348da5b7fdef2fb1e7505b64daa1437d31af72',
  '0018_read_by_key': '2c2eca0131465937b145663783dead02370a9994525ac3b7fe2e4208dd83075b',
  '0019_isolated_takeovers': 'add442e6dff3c708738afd385ece26566ef97893d3a6408bbd4d17cd54a5d2b2',
  '0020_revoke_public_execute': 'c53d1ac0d26d0f44273d53d7eb59a6467cc7f8badcf2daddf096d5975db2571e',
  '0021_inline_type_match': 'b7222cac021410ed78915454510efeae959508051e4a249f3930324e18360360',
}

describeFrozenMigrations(
  'producer migrations',
  producerMigrations,
  FROZEN,
  new URL('../src/migrations/', import.meta.url),
)
