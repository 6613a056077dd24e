// Constrained decoding, checked from outside: a random-weight model answers 200 seeds each of a
// strict json_schema, a guided_regex and tool_choice "required" with two tools, sampling at
// temperature 1 with budgets tight enough that free text would be cut off (64, 24 and 48 tokens). Every output must
// parse and validate (ajv for schemas and tool arguments, a JavaScript RegExp for the regex)
// and end by itself: no finish_reason "length". Run by tests/e2e_openai_sdk.sh
// (AICLOUD_BASE_URL, AICLOUD_API_KEY, AICLOUD_MODEL; AICLOUD_SEEDS to change the count).
'use strict';
const test = require('node:test');
const assert = require('node:assert/strict');
const { env, client, validate } = require('./common.cjs');

const model = env('AICLOUD_MODEL');
const seeds = Number(process.env.AICLOUD_SEEDS || 200);
const inFlight = 16;
const openai = client();

const record = {
  type: 'object',
  properties: {
    id: { type: 'string', pattern: '^[A-Z]{2}-[0-9]{3}$' },
    count: { type: 'integer' },
    status: { enum: ['open', 'closed', 'pending'] },
    owner: {
      type: 'object',
      properties: { name: { type: 'string', maxLength: 12 }, admin: { type: 'boolean' } },
      required: ['name', 'admin'],
      additionalProperties: false,
    },
    scores: { type: 'array', items: { type: 'number' }, minItems: 1, maxItems: 3 },
    note: { anyOf: [{ type: 'string', maxLength: 10 }, { type: 'null' }] },
  },
  required: ['id', 'count', 'status', 'owner', 'scores', 'note'],
  additionalProperties: false,
};
const regex = '[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])-[A-Z]{3,6}';
const tools = [
  {
    type: 'function',
    function: {
      name: 'lookup',
      parameters: {
        type: 'object',
        properties: { query: { type: 'string', maxLength: 16 }, limit: { type: 'integer' } },
        required: ['query', 'limit'],
        additionalProperties: false,
      },
    },
  },
  {
    type: 'function',
    function: {
      name: 'set_mode',
      parameters: {
        type: 'object',
        properties: { mode: { enum: ['fast', 'safe'] }, level: { type: ['integer', 'null'] } },
        required: ['mode', 'level'],
        additionalProperties: false,
      },
    },
  },
];

// Runs `one(seed)` for every seed with `inFlight` requests at a time; returns the failures.
async function sweep(one) {
  const failures = [];
  let next = 0;
  async function worker() {
    while (next < seeds) {
      const seed = next++;
      try {
        const problem = await one(seed);
        if (problem) failures.push(`seed ${seed}: ${problem}`);
      } catch (e) {
        failures.push(`seed ${seed}: ${e.message}`);
      }
    }
  }
  const t0 = Date.now();
  await Promise.all(Array.from({ length: inFlight }, worker));
  return { failures, seconds: (Date.now() - t0) / 1000 };
}

function report(name, { failures, seconds }) {
  console.log(`# ${name}: ${seeds - failures.length}/${seeds} valid, ${seconds.toFixed(1)} s`);
  assert.deepEqual(failures.slice(0, 5), [], `${failures.length} of ${seeds} failed`);
}

const user = [{ role: 'user', content: 'Go.' }];

test(`json_schema strict over ${seeds} seeds`, async () => {
  report('json_schema', await sweep(async (seed) => {
    const r = await openai.chat.completions.create({
      model, messages: user, temperature: 1, seed, max_tokens: 64,
      response_format: { type: 'json_schema', json_schema: { name: 'record', schema: record, strict: true } },
    });
    const c = r.choices[0];
    if (c.finish_reason !== 'stop') return `finish_reason ${c.finish_reason}: ${c.message.content}`;
    let v;
    try {
      v = JSON.parse(c.message.content);
    } catch (e) {
      return `does not parse (${e.message}): ${c.message.content}`;
    }
    const err = validate(record, v);
    return err ? `${err}: ${c.message.content}` : null;
  }));
});

test(`guided_regex over ${seeds} seeds`, async () => {
  const re = new RegExp(`^(?:${regex})$`);
  report('guided_regex', await sweep(async (seed) => {
    const r = await openai.completions.create({ model, prompt: 'Date and code:', temperature: 1, seed, max_tokens: 24, guided_regex: regex });
    const c = r.choices[0];
    if (c.finish_reason !== 'stop') return `finish_reason ${c.finish_reason}: ${c.text}`;
    return re.test(c.text) ? null : `no match: ${JSON.stringify(c.text)}`;
  }));
});

test(`tool_choice required over ${seeds} seeds`, async () => {
  const byName = Object.fromEntries(tools.map((t) => [t.function.name, t.function.parameters]));
  report('tool_choice required', await sweep(async (seed) => {
    const r = await openai.chat.completions.create({
      model, messages: user, tools, tool_choice: 'required', temperature: 1, seed, max_tokens: 48,
    });
    const c = r.choices[0];
    if (c.finish_reason !== 'tool_calls') return `finish_reason ${c.finish_reason}: ${JSON.stringify(c.message)}`;
    if (!c.message.tool_calls || c.message.tool_calls.length === 0) return 'no tool calls';
    for (const call of c.message.tool_calls) {
      const schema = byName[call.function.name];
      if (!schema) return `unknown tool ${call.function.name}`;
      let args;
      try {
        args = JSON.parse(call.function.arguments);
      } catch (e) {
        return `arguments do not parse: ${call.function.arguments}`;
      }
      const err = validate(schema, args);
      if (err) return `${call.function.name}: ${err}: ${call.function.arguments}`;
    }
    return null;
  }));
});
