// What the OpenAI SDK suites share: the packages scripts/setup installed into the cache folder
// (resolved from there, never from the repository), and the endpoint under test from the
// environment that tests/e2e_openai_sdk.sh sets.
'use strict';
const path = require('node:path');
const { createRequire } = require('node:module');

const cacheDir =
  process.env.AICLOUD_CACHE ||
  path.join(process.env.XDG_CACHE_HOME || path.join(process.env.HOME || '/root', '.cache'), 'aicloud');
const npmRequire = createRequire(path.join(cacheDir, 'npm', 'node_modules', 'noop.js'));

function need(name) {
  try {
    return npmRequire(name);
  } catch (e) {
    throw new Error(`${name} is not installed in ${cacheDir}/npm: run scripts/setup (${e.message})`);
  }
}

const OpenAI = need('openai');
const Ajv = need('ajv');

function env(name) {
  const v = process.env[name];
  if (!v) throw new Error(`${name} is not set (tests/e2e_openai_sdk.sh sets it)`);
  return v;
}

// The client an application would build: base URL and key, nothing else.
function client(apiKey = env('AICLOUD_API_KEY')) {
  return new OpenAI({ baseURL: env('AICLOUD_BASE_URL') + '/v1', apiKey, maxRetries: 0, timeout: 120000 });
}

// Validates `value` against `schema` with ajv (strict mode off: OpenAI-style schemas carry
// annotations ajv's strict mode rejects); returns ajv's error text or null.
function validate(schema, value) {
  const ajv = new Ajv({ strict: false, allErrors: true });
  const check = ajv.compile(schema);
  return check(value) ? null : ajv.errorsText(check.errors);
}

module.exports = { OpenAI, Ajv, env, client, validate };
