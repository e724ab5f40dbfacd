// api_contract.mjs — contract tests of the REST API against a running server:
//   node tests/api_contract.mjs BASE_URL
// with TOKEN_READ, TOKEN_TRIGGER, TOKEN_ADMIN, TOKEN_REVOKED, TOKEN_EXPIRED and RUN_ID (a run
// with a step "a"), MODEL (a model with version 1), PIPELINE_YAML (the text of the registered
// pipeline "contract") in the environment.
//
// 1. The served OpenAPI document passes @apidevtools/swagger-parser's validation.
// 2. Every operation of the document is called, and every response body is validated with
//    Ajv (JSON Schema 2020-12, the dialect of OpenAPI 3.1) against the schema the document
//    gives for that status (or `default`); the content type must match too.
// 3. The auth matrix: every operation x {no token, read, trigger, admin, revoked, expired,
//    wrong} answers 401 / 403 / neither, as the operation's x-tpuflow-scope says.
// 4. Error answers: malformed, refused and unknown requests (bad JSON, a body too big, no
//    JSON content type, unknown fields, unknown or repeated query arguments, bad cursors, an
//    over-long or reused Idempotency-Key, other methods, OPTIONS, HEAD) each get the status
//    docs/api.md gives, a problem body (type, title, status, detail) documented by the
//    operation, and the headers the status calls for (Allow, WWW-Authenticate).
// Exits 0 when everything holds, 1 with a list of failures otherwise.
import SwaggerParser from '@apidevtools/swagger-parser';
import Ajv2020 from 'ajv/dist/2020.js';

const base = process.argv[2];
const env = process.env;
const tokens = {
  read: env.TOKEN_READ, trigger: env.TOKEN_TRIGGER, admin: env.TOKEN_ADMIN,
  revoked: env.TOKEN_REVOKED, expired: env.TOKEN_EXPIRED,
  wrong: 'tpf_' + '0'.repeat(64), none: null,
};
const run = env.RUN_ID, model = env.MODEL;
const scheduled = 'name: ctick\nschedule: "@daily"\nsteps:\n  - name: a\n    type: shell\n' +
                  '    with: {argv: [/bin/true]}\n';
const failures = [];
const fail = (what) => { failures.push(what); console.error('FAIL ' + what); };

async function call(method, path, { token = tokens.admin, body, raw, headers = {}, stream } = {}) {
  const h = { ...headers };
  if (token) h.Authorization = 'Bearer ' + token;
  if ((body !== undefined || raw !== undefined) && !h['Content-Type'])
    h['Content-Type'] = 'application/json';
  const ctl = new AbortController();
  const res = await fetch(base + path, {
    method, headers: h, body: raw !== undefined ? raw : body === undefined ? undefined : JSON.stringify(body),
    signal: ctl.signal,
  });
  const type = res.headers.get('content-type') || '';
  let text = '';
  if (stream && type.startsWith('text/event-stream')) {
    // Read the first chunk only: a stream of a live run does not end.
    const reader = res.body.getReader();
    const { value } = await reader.read();
    text = value ? new TextDecoder().decode(value) : '';
    ctl.abort();
  } else {
    text = await res.text();
  }
  return { status: res.status, type, text, headers: res.headers };
}

const doc = await (await fetch(base + '/api/v1/openapi.json')).json();
try {
  await SwaggerParser.validate(structuredClone(doc));
} catch (e) {
  fail('openapi.json does not validate: ' + e.message);
}

const ajv = new Ajv2020({ strict: false, allErrors: true });
ajv.addSchema({ $id: 'api.json', components: doc.components });
const compiled = new Map();
function validator(schema) {
  const key = JSON.stringify(schema);
  if (!compiled.has(key)) {
    const s = JSON.parse(key.replaceAll('"#/components/', '"api.json#/components/'));
    compiled.set(key, ajv.compile(s));
  }
  return compiled.get(key);
}

// The requests that exercise each operation (operationId -> list of calls). Every operation
// of the document must appear here; the check below enforces it.
const cases = {
  healthz: [['GET', '/healthz']],
  readyz: [['GET', '/readyz']],
  openapi: [['GET', '/api/v1/openapi.json']],
  dashboard: [['GET', '/']],
  dashboardScript: [['GET', '/ui/app.js']],
  dashboardStyle: [['GET', '/ui/app.css']],
  metrics: [['GET', '/metrics']],
  listRuns: [['GET', '/api/v1/runs?limit=2'], ['GET', '/api/v1/runs?state=pending&since=0'],
             ['GET', '/api/v1/runs?limit=0']],
  createRun: [['POST', '/api/v1/runs', { yaml: env.PIPELINE_YAML, labels: { ci: 'contract' } }],
              ['POST', '/api/v1/runs', { pipeline: 'contract', params: {}, priority: 3,
                                         project: 'ci' }],
              ['POST', '/api/v1/runs', { pipeline: 'no-such-pipeline' }],
              ['POST', '/api/v1/runs', { yaml: 'name: [' }]],
  getRun: [['GET', `/api/v1/runs/${run}`], ['GET', '/api/v1/runs/nosuchrun']],
  listRunSteps: [['GET', `/api/v1/runs/${run}/steps`]],
  getStepLogs: [['GET', `/api/v1/runs/${run}/steps/a/logs`],
                ['GET', `/api/v1/runs/${run}/steps/zz/logs`]],
  listStepCheckpoints: [['GET', `/api/v1/runs/${run}/steps/a/checkpoints`],
                        ['GET', `/api/v1/runs/${run}/steps/zz/checkpoints`]],
  getRunGraph: [['GET', `/api/v1/runs/${run}/graph`], ['GET', '/api/v1/runs/nosuchrun/graph']],
  streamRunEvents: [['GET', `/api/v1/runs/${run}/events`]],
  deleteRun: [['DELETE', '/api/v1/runs/nosuchrun'],
              ['DELETE', `/api/v1/runs/${run}?dry_run=true`]],
  gcRuns: [['POST', '/api/v1/runs:gc', { keep_last: 100000 }],
           ['POST', '/api/v1/runs:gc', {}]],
  cancelRun: [['POST', `/api/v1/runs/${run}:cancel`]],
  retryRun: [['POST', `/api/v1/runs/${run}:retry`]],
  resumeRun: [['POST', `/api/v1/runs/${run}:resume`]],
  streamEvents: [['GET', '/api/v1/events']],
  listPipelines: [['GET', '/api/v1/pipelines']],
  getPipeline: [['GET', '/api/v1/pipelines/contract'], ['GET', '/api/v1/pipelines/none']],
  registerPipeline: [['POST', '/api/v1/pipelines', { yaml: env.PIPELINE_YAML, name: 'c.yaml' }],
                     ['POST', '/api/v1/pipelines', { yaml: 'name: x\nsteps: 3\n' }]],
  unregisterPipeline: [['DELETE', '/api/v1/pipelines/contract'],
                       ['DELETE', '/api/v1/pipelines/contract']],
  listSchedules: [['GET', '/api/v1/schedules']],
  createSchedule: [['POST', '/api/v1/schedules', { yaml: scheduled }],
                   ['POST', '/api/v1/schedules', { yaml: env.PIPELINE_YAML }]],
  getSchedule: [['GET', '/api/v1/schedules/ctick'], ['GET', '/api/v1/schedules/none']],
  pauseSchedule: [['POST', '/api/v1/schedules/ctick:pause'],
                  ['POST', '/api/v1/schedules/none:pause']],
  resumeSchedule: [['POST', '/api/v1/schedules/ctick:resume'],
                   ['POST', '/api/v1/schedules/none:resume']],
  deleteSchedule: [['DELETE', '/api/v1/schedules/ctick'], ['DELETE', '/api/v1/schedules/ctick']],
  fireSchedules: [['POST', '/api/v1/schedules:fire']],
  validatePipeline: [['POST', '/api/v1/pipelines:validate', { yaml: env.PIPELINE_YAML }],
                     ['POST', '/api/v1/pipelines:validate', { yaml: 'steps: 3' }]],
  listModels: [['GET', '/api/v1/models']],
  getModel: [['GET', `/api/v1/models/${model}`], ['GET', '/api/v1/models/none']],
  listModelVersions: [['GET', `/api/v1/models/${model}/versions`],
                      ['GET', '/api/v1/models/none/versions']],
  getModelVersion: [['GET', `/api/v1/models/${model}/versions/1`],
                    ['GET', `/api/v1/models/${model}/versions/9`]],
  compareModel: [['GET', `/api/v1/models/${model}:compare?a=1&b=latest`]],
  setModelAlias: [['POST', `/api/v1/models/${model}/aliases`, { alias: 'staging', version: 1 }]],
  getSlices: [['GET', '/api/v1/slices']],
  getQueue: [['GET', '/api/v1/queue']],
  failChip: [['POST', '/api/v1/slices/v4/chips/0,0,1:fail'],
             ['POST', '/api/v1/slices/v4/chips/x:fail']],
  repairChip: [['POST', '/api/v1/slices/v4/chips/0,0,1:repair'],
               ['POST', '/api/v1/slices/v4/chips/0,0,1:repair']],
  whoami: [['GET', '/api/v1/whoami']],
  listTokens: [['GET', '/api/v1/tokens']],
  createToken: [['POST', '/api/v1/tokens', { name: 'contract', scope: 'read', expires_in: '1h' }],
                ['POST', '/api/v1/tokens', { name: 'x', scope: 'root' }]],
  revokeToken: [['DELETE', '/api/v1/tokens/contract'], ['DELETE', '/api/v1/tokens/nobody']],
  // model serving: the contract model's bundle does not exist, so its versions are
  // UNAVAILABLE (tests/test_serve.c covers the successful answers)
  tfsPredict: [['POST', `/v1/models/${model}:predict`, { instances: [[1]] }],
               ['POST', '/v1/models/none:predict', { instances: [[1]] }]],
  tfsPredictVersion: [['POST', `/v1/models/${model}/versions/1:predict`, { inputs: [[1]] }]],
  tfsPredictLabel: [['POST', `/v1/models/${model}/labels/nolabel:predict`, { instances: [] }]],
  tfsModelStatus: [['GET', `/v1/models/${model}`], ['GET', '/v1/models/none']],
  tfsModelMetadata: [['GET', `/v1/models/${model}/metadata`]],
  v2Live: [['GET', '/v2/health/live']],
  v2Ready: [['GET', '/v2/health/ready']],
  v2ModelMetadata: [['GET', `/v2/models/${model}`]],
  v2ModelReady: [['GET', `/v2/models/${model}/ready`]],
  v2Infer: [['POST', `/v2/models/${model}/infer`, { inputs: [] }]],
  v2InferVersion: [['POST', `/v2/models/${model}/versions/1/infer`, { inputs: [] }]],
  tfsVersionStatus: [['GET', `/v1/models/${model}/versions/1`],
                     ['GET', `/v1/models/${model}/versions/9`]],
  tfsLabelStatus: [['GET', `/v1/models/${model}/labels/nolabel`]],
  tfsVersionMetadata: [['GET', `/v1/models/${model}/versions/1/metadata`]],
  tfsLabelMetadata: [['GET', `/v1/models/${model}/labels/nolabel/metadata`]],
  v2ServerMetadata: [['GET', '/v2']],
  v2VersionMetadata: [['GET', `/v2/models/${model}/versions/1`]],
  v2VersionReady: [['GET', `/v2/models/${model}/versions/1/ready`]],
};

const ops = [];
for (const [path, item] of Object.entries(doc.paths))
  for (const [method, op] of Object.entries(item)) ops.push({ path, method: method.toUpperCase(), op });

function checkResponse(label, op, r) {
  const spec = op.responses[String(r.status)] || op.responses.default;
  if (!spec) return fail(`${label}: status ${r.status} is not documented`);
  if (r.status >= 500) fail(`${label}: ${r.status} ${r.text.slice(0, 200)}`);
  const [ctype, media] = Object.entries(spec.content || {})[0] || [];
  if (!ctype) return;
  if (!r.type.startsWith(ctype.split(';')[0]))
    return fail(`${label}: content type '${r.type}', documented '${ctype}'`);
  if (!ctype.includes('json')) return;
  let body;
  try { body = JSON.parse(r.text); } catch { return fail(`${label}: body is not JSON`); }
  const v = validator(media.schema);
  if (!v(body)) fail(`${label}: ${r.status} body does not match its schema: ` +
                     ajv.errorsText(v.errors) + ' in ' + r.text.slice(0, 300));
}

let calls = 0;
for (const { path, method, op } of ops) {
  const list = cases[op.operationId];
  if (!list) { fail(`${method} ${path} (${op.operationId}) has no contract case`); continue; }
  for (const [m, p, body] of list) {
    const stream = (op.responses['200']?.content || {})['text/event-stream'] !== undefined;
    const r = await call(m, p, { body, stream });
    calls++;
    checkResponse(`${m} ${p}`, op, r);
  }
}

// The auth matrix, from each operation's documented scope.
const rank = { public: 0, read: 1, trigger: 2, admin: 3 };
let matrix = 0;
for (const { path, method, op } of ops) {
  const scope = op['x-tpuflow-scope'];
  const [m, p, body] = cases[op.operationId]?.[0] || [];
  if (!m) continue;
  for (const [who, tok] of Object.entries(tokens)) {
    const stream = (op.responses['200']?.content || {})['text/event-stream'] !== undefined;
    const r = await call(m, p, { token: tok, body, stream });
    matrix++;
    let want;
    if (scope === 'public') want = 'ok';
    else if (['none', 'revoked', 'expired', 'wrong'].includes(who)) want = 401;
    else if (scope === 'predict') want = who === 'admin' ? 'ok' : 403; // its own branch
    else want = rank[who] >= rank[scope] ? 'ok' : 403;
    const got = r.status === 401 || r.status === 403 ? r.status : 'ok';
    if (got !== want) fail(`auth ${who} on ${m} ${p} (scope ${scope}): ${r.status}, want ${want}`);
    checkResponse(`auth ${who} ${m} ${p}`, op, r);
  }
}

// Error answers. Each case: the request, the status wanted, and what else must hold.
const opOf = (method, path) => {
  for (const o of ops) {
    if (o.method !== method) continue;
    const re = new RegExp('^' + o.path.replace(/[.*+?^$()|[\]\\]/g, '\\$&')
      .replace(/\{[^}]+\}/g, '[^/:]+') + '$');
    if (re.test(path.split('?')[0])) return o;
  }
  return null;
};
const problemCheck = validator({ $ref: '#/components/schemas/Problem' });
const detail = (r) => { try { return JSON.parse(r.text).detail || ''; } catch { return ''; } };
const runBody = { yaml: env.PIPELINE_YAML };
const key = 'contract-' + Date.now();
const errorCases = [
  ['GET', '/api/v1/nope', {}, 404],
  ['PUT', '/api/v1/runs', {}, 405, (r) => r.headers.get('allow') === 'GET, HEAD, POST, OPTIONS'],
  ['HEAD', '/api/v1/events', { token: tokens.read }, 405,
   (r) => r.headers.get('allow') === 'GET, OPTIONS'],
  ['POST', '/api/v1/runs', { raw: '{"yaml": tru}' }, 400, (r) => /byte offset \d+/.test(detail(r))],
  ['POST', '/api/v1/runs', { raw: '[1]' }, 400],
  ['POST', '/api/v1/runs', { raw: JSON.stringify(runBody), headers: { 'Content-Type': 'text/plain' } },
   415],
  ['POST', '/api/v1/runs', { raw: JSON.stringify({ yaml: 'x'.repeat(2 << 20) }) }, 413],
  ['POST', '/api/v1/runs', { body: { ...runBody, colour: 1 } }, 422],
  ['POST', '/api/v1/runs', { body: { pipelne: 'contract' } }, 422,
   (r) => detail(r).includes("did you mean 'pipeline'")],
  ['GET', '/api/v1/runs?status=failed', {}, 400, (r) => detail(r).includes("did you mean 'state'")],
  ['GET', '/api/v1/runs?limit=1&limit=2', {}, 400],
  ['GET', '/api/v1/runs?limit=501', {}, 400],
  ['GET', '/api/v1/runs?cursor=no-such-run', {}, 400],
  ['GET', '/api/v1/runs?cursor=x@soon', {}, 400],
  ['GET', '/api/v1/whoami?verbose=1', {}, 400],
  ['GET', '/api/v1/runs/no-such-run', {}, 404],
  ['GET', '/api/v1/runs', { token: null }, 401,
   (r) => /^Bearer/.test(r.headers.get('www-authenticate') || '')],
  ['POST', '/api/v1/runs', { body: runBody, headers: { 'Idempotency-Key': 'k'.repeat(256) } }, 400],
  ['POST', '/api/v1/runs', { body: runBody, headers: { 'Idempotency-Key': key } }, 201],
  ['POST', '/api/v1/runs', { body: runBody, headers: { 'Idempotency-Key': key } }, 201,
   (r) => r.headers.get('idempotent-replayed') === 'true'],
  ['POST', '/api/v1/runs', { body: { ...runBody, labels: { x: 'y' } }, headers: { 'Idempotency-Key': key } },
   422],
  // a pending run is not deleted; the refusal carries its delete report
  ['DELETE', `/api/v1/runs/${run}`, {}, 409, (r) => {
    const b = JSON.parse(r.text);
    return b.reason === 'busy' && b.run === run && b.deleted === false && b.objects === 0;
  }],
];
let errors = 0;
for (const [m, p, opts, want, extra] of errorCases) {
  const r = await call(m, p, opts);
  errors++;
  const label = `error case ${m} ${p.slice(0, 60)}`;
  if (r.status !== want) { fail(`${label}: ${r.status}, want ${want}: ${r.text.slice(0, 200)}`); continue; }
  if (extra && !extra(r)) fail(`${label}: ${r.status} without what it must carry: ` +
                               `${[...r.headers].join(' ')} ${r.text.slice(0, 300)}`);
  if (m === 'HEAD' || want < 400) continue;
  if (!r.type.startsWith('application/problem+json')) { fail(`${label}: type '${r.type}'`); continue; }
  const b = JSON.parse(r.text);
  if (!problemCheck(b) || b.status !== want || typeof b.detail !== 'string' || !b.detail)
    fail(`${label}: not a problem of status ${want}: ${r.text.slice(0, 200)}`);
  const o = opOf(m, p);
  if (o) checkResponse(label, o.op, r);
}
// OPTIONS: what a path takes, without a token
{
  const r = await call('OPTIONS', `/api/v1/runs/${run}`, { token: null });
  errors++;
  if (r.status !== 204 || r.headers.get('allow') !== 'GET, HEAD, DELETE, OPTIONS')
    fail(`OPTIONS /api/v1/runs/{id}: ${r.status}, Allow '${r.headers.get('allow')}'`);
}

console.log(`contract: ${ops.length} operations, ${calls} calls validated against the ` +
            `document, auth matrix ${matrix} calls, ${errors} error answers, ` +
            `${failures.length} failures`);
process.exit(failures.length ? 1 : 0);
