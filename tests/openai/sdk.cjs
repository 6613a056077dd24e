// The official OpenAI Node SDK against aicloud, as an application developer uses it: chat,
// streaming, completions, tools (streamed and not, required and named), a replayed tool
// conversation, structured outputs, n, logit_bias, embeddings with the SDK's defaults, and
// errors arriving as the SDK's error classes. Run by tests/e2e_openai_sdk.sh against the
// engine directly and through the gateway with a tenant key (AICLOUD_BASE_URL, AICLOUD_API_KEY,
// AICLOUD_MODEL; AICLOUD_ENGINE_URL for /tokenize; AICLOUD_THROUGH_GATEWAY=1 and
// AICLOUD_OTHER_MODEL for the gateway's own refusals).
'use strict';
const test = require('node:test');
const assert = require('node:assert/strict');
const { OpenAI, env, client, validate } = require('./common.cjs');

const model = env('AICLOUD_MODEL');
const gateway = process.env.AICLOUD_THROUGH_GATEWAY === '1';
const openai = client();

const weather = {
  type: 'function',
  function: {
    name: 'get_weather',
    description: 'The weather in a city now',
    parameters: {
      type: 'object',
      properties: { city: { type: 'string', maxLength: 16 }, unit: { type: 'string', enum: ['celsius', 'fahrenheit'] } },
      required: ['city', 'unit'],
      additionalProperties: false,
    },
  },
};
const add = {
  type: 'function',
  function: {
    name: 'add',
    description: 'Adds two integers',
    parameters: {
      type: 'object',
      properties: { a: { type: 'integer' }, b: { type: 'integer' } },
      required: ['a', 'b'],
      additionalProperties: false,
    },
  },
};
const tools = [weather, add];
const byName = { get_weather: weather, add };
const ask = [{ role: 'user', content: 'What is the weather in Paris, and what is 2 + 3?' }];

function checkCall(call, allowed) {
  assert.match(call.id, /^call_[A-Za-z0-9]{24}$/);
  assert.equal(call.type, 'function');
  assert.ok(allowed.includes(call.function.name), `unexpected tool ${call.function.name}`);
  const args = JSON.parse(call.function.arguments);
  const err = validate(byName[call.function.name].function.parameters, args);
  assert.equal(err, null, `arguments ${call.function.arguments} do not match ${call.function.name}: ${err}`);
}

test('chat completion', async () => {
  const r = await openai.chat.completions.create({ model, messages: ask, max_tokens: 8, seed: 1 });
  assert.equal(r.object, 'chat.completion');
  assert.equal(r.choices.length, 1);
  assert.equal(r.choices[0].message.role, 'assistant');
  assert.equal(typeof r.choices[0].message.content, 'string');
  assert.ok(['stop', 'length'].includes(r.choices[0].finish_reason));
  assert.ok(r.usage.prompt_tokens > 0 && r.usage.completion_tokens > 0);
});

test('streamed chat: role first, content deltas, finish reason, usage last', async () => {
  const stream = await openai.chat.completions.create({
    model, messages: ask, max_tokens: 8, seed: 2, stream: true, stream_options: { include_usage: true },
  });
  let first = null, text = '', finish = null, usage = null;
  for await (const chunk of stream) {
    if (chunk.usage) usage = chunk.usage;
    for (const c of chunk.choices) {
      if (first === null) first = c.delta;
      if (c.delta.content) text += c.delta.content;
      if (c.finish_reason) finish = c.finish_reason;
    }
  }
  assert.equal(first.role, 'assistant');
  assert.ok(text.length > 0);
  assert.ok(['stop', 'length'].includes(finish));
  assert.ok(usage && usage.completion_tokens > 0);
  const whole = await openai.chat.completions.create({ model, messages: ask, max_tokens: 8, seed: 2 });
  assert.equal(text, whole.choices[0].message.content, 'the stream carries the same text as the whole answer');
});

test('completion', async () => {
  const r = await openai.completions.create({ model, prompt: 'Once upon a time', max_tokens: 6, seed: 3 });
  assert.equal(r.object, 'text_completion');
  assert.equal(typeof r.choices[0].text, 'string');
  assert.equal(r.usage.completion_tokens <= 6, true);
});

test('tool_choice required: every call names a tool and its arguments validate', async () => {
  for (const seed of [1, 2, 3]) {
    const r = await openai.chat.completions.create({ model, messages: ask, tools, tool_choice: 'required', max_tokens: 120, seed });
    const c = r.choices[0];
    assert.equal(c.finish_reason, 'tool_calls');
    assert.ok(c.message.tool_calls.length >= 1);
    for (const call of c.message.tool_calls) checkCall(call, ['get_weather', 'add']);
  }
});

test('tool_choice named: one call of that function, finish_reason stop', async () => {
  const r = await openai.chat.completions.create({
    model, messages: ask, tools, tool_choice: { type: 'function', function: { name: 'add' } }, max_tokens: 80, seed: 4,
  });
  const c = r.choices[0];
  assert.equal(c.finish_reason, 'stop');
  assert.equal(c.message.tool_calls.length, 1);
  checkCall(c.message.tool_calls[0], ['add']);
});

test('streamed tool calls: name first, argument pieces, and the SDK assembles the calls', async () => {
  const params = { model, messages: ask, tools, tool_choice: 'required', parallel_tool_calls: false, max_tokens: 120, seed: 5 };
  // The raw stream: for each call, one delta with index, id, type and name (arguments ""),
  // then argument pieces only.
  const raw = await openai.chat.completions.create({ ...params, stream: true });
  const calls = [];
  let finish = null;
  for await (const chunk of raw) {
    for (const c of chunk.choices) {
      if (c.finish_reason) finish = c.finish_reason;
      for (const d of c.delta.tool_calls || []) {
        if (d.id) {
          assert.equal(calls.length, d.index);
          assert.equal(d.type, 'function');
          assert.equal(d.function.arguments, '');
          calls.push({ id: d.id, type: d.type, function: { name: d.function.name, arguments: '' } });
        } else {
          assert.equal(d.function.name, undefined, 'the name is sent once');
          calls[d.index].function.arguments += d.function.arguments;
        }
      }
    }
  }
  assert.equal(finish, 'tool_calls');
  assert.equal(calls.length, 1, 'parallel_tool_calls: false gives one call');
  checkCall(calls[0], ['get_weather', 'add']);
  const whole = await openai.chat.completions.create(params);
  assert.equal(calls[0].function.name, whole.choices[0].message.tool_calls[0].function.name);
  assert.equal(calls[0].function.arguments, whole.choices[0].message.tool_calls[0].function.arguments);

  // The SDK's own stream helper accumulates the same calls.
  const helper = openai.beta.chat.completions.stream({ ...params, stream: true });
  const final = await helper.finalChatCompletion();
  assert.equal(final.choices[0].finish_reason, 'tool_calls');
  checkCall(final.choices[0].message.tool_calls[0], ['get_weather', 'add']);
  assert.equal(final.choices[0].message.tool_calls[0].function.arguments, calls[0].function.arguments);
});

test('a replayed tool conversation is accepted and answered', async () => {
  const first = await openai.chat.completions.create({ model, messages: ask, tools, tool_choice: 'required', max_tokens: 120, seed: 6 });
  const msg = first.choices[0].message;
  const messages = [...ask, msg];
  for (const call of msg.tool_calls) messages.push({ role: 'tool', tool_call_id: call.id, content: '{"ok": true}' });
  const second = await openai.chat.completions.create({ model, messages, tools, max_tokens: 8, seed: 7 });
  assert.equal(second.choices.length, 1);
  assert.ok(second.usage.prompt_tokens > first.usage.prompt_tokens);
  await assert.rejects(
    openai.chat.completions.create({
      model, max_tokens: 4,
      messages: [...ask, { role: 'assistant', content: null, tool_calls: [{ id: 'x', type: 'function', function: { name: 'add', arguments: 'not json' } }] }],
    }),
    (e) => e instanceof OpenAI.BadRequestError && /arguments/.test(e.message),
  );
});

const person = {
  type: 'object',
  properties: {
    name: { type: 'string', maxLength: 20 },
    age: { type: 'integer' },
    role: { type: 'string', enum: ['admin', 'user'] },
    email: { type: ['string', 'null'], maxLength: 20 },
    tags: { type: 'array', items: { type: 'string', maxLength: 8 }, minItems: 1, maxItems: 3 },
  },
  required: ['name', 'age', 'role', 'email', 'tags'],
  additionalProperties: false,
};

test('response_format json_schema strict: the output parses and validates', async () => {
  for (const seed of [1, 2, 3]) {
    const r = await openai.chat.completions.create({
      model, messages: [{ role: 'user', content: 'Describe a person as JSON.' }], max_tokens: 200, seed,
      response_format: { type: 'json_schema', json_schema: { name: 'person', schema: person, strict: true } },
    });
    const c = r.choices[0];
    assert.equal(c.finish_reason, 'stop');
    const value = JSON.parse(c.message.content);
    assert.equal(validate(person, value), null);
  }
});

test('response_format json_object: the output is a JSON object', async () => {
  const r = await openai.chat.completions.create({
    model, messages: [{ role: 'user', content: 'Answer in JSON.' }], max_tokens: 100, seed: 8,
    response_format: { type: 'json_object' },
  });
  const v = JSON.parse(r.choices[0].message.content);
  assert.equal(typeof v, 'object');
  assert.ok(v !== null && !Array.isArray(v));
});

test('n = 2: two choices, their tokens summed in usage', async () => {
  const r = await openai.chat.completions.create({ model, messages: ask, max_tokens: 5, n: 2, seed: 9, ignore_eos: true });
  assert.equal(r.choices.length, 2);
  assert.deepEqual(r.choices.map((c) => c.index).sort(), [0, 1]);
  assert.equal(r.usage.completion_tokens, 10);
  assert.notEqual(r.choices[0].message.content, r.choices[1].message.content);
  const s = await openai.chat.completions.create({ model, messages: ask, max_tokens: 5, n: 2, seed: 9, ignore_eos: true, stream: true });
  const texts = ['', ''];
  for await (const chunk of s) for (const c of chunk.choices) texts[c.index] += c.delta.content || '';
  assert.deepEqual(texts, r.choices.map((c) => c.message.content));
});

async function tokenize(text) {
  const res = await fetch(env('AICLOUD_ENGINE_URL') + '/tokenize', {
    method: 'POST', headers: { Authorization: `Bearer ${process.env.AICLOUD_ENGINE_KEY || ''}` },
    body: JSON.stringify({ prompt: text, add_special_tokens: false }),
  });
  assert.equal(res.status, 200);
  return (await res.json()).tokens;
}

test('logit_bias: +100 forces a token, -100 bans the greedy one', async () => {
  const [hello] = await tokenize('hello');
  const forced = await openai.completions.create({
    model, prompt: 'x', max_tokens: 3, temperature: 1, seed: 10, logit_bias: { [hello]: 100 }, ignore_eos: true,
  });
  assert.equal(forced.choices[0].text, 'hello'.repeat(3));
  const greedy = await openai.completions.create({ model, prompt: 'x', max_tokens: 1, temperature: 0, ignore_eos: true });
  const banned = {};
  for (const id of await tokenize(greedy.choices[0].text)) banned[id] = -100;
  const other = await openai.completions.create({ model, prompt: 'x', max_tokens: 1, temperature: 0, ignore_eos: true, logit_bias: banned });
  assert.notEqual(other.choices[0].text, greedy.choices[0].text);
});

test('embeddings with the SDK defaults (base64 on the wire) equal the float form', async () => {
  const input = ['a cat', 'the sea'];
  const byDefault = await openai.embeddings.create({ model, input });
  const floats = await openai.embeddings.create({ model, input, encoding_format: 'float' });
  assert.equal(byDefault.data.length, 2);
  for (let i = 0; i < 2; i++) {
    const a = byDefault.data[i].embedding, b = floats.data[i].embedding;
    assert.ok(Array.isArray(a) && a.length > 0 && a.length === b.length);
    for (let k = 0; k < a.length; k++) assert.ok(Math.abs(a[k] - b[k]) <= 1e-6 * Math.max(1, Math.abs(b[k])), `dim ${k}: ${a[k]} vs ${b[k]}`);
    assert.ok(Math.abs(a.reduce((s, x) => s + x * x, 0) - 1) < 1e-3, 'unit length');
  }
});

test('errors arrive as the SDK error classes, naming the field', async () => {
  await assert.rejects(openai.chat.completions.create({ model: 'no-such-model', messages: ask }), (e) => e instanceof OpenAI.NotFoundError);
  await assert.rejects(openai.chat.completions.create({ model, messages: ask, n: 17 }), (e) => e instanceof OpenAI.BadRequestError && e.param === 'n');
  await assert.rejects(
    openai.chat.completions.create({
      model, messages: ask,
      response_format: { type: 'json_schema', json_schema: { name: 'x', schema: { type: 'object', oneOf: [] } } },
    }),
    (e) => e instanceof OpenAI.BadRequestError && /oneOf/.test(e.message) && /^response_format/.test(e.param),
  );
  await assert.rejects(
    openai.chat.completions.create({ model, messages: ask, tools, tool_choice: { type: 'function', function: { name: 'nope' } } }),
    (e) => e instanceof OpenAI.BadRequestError && e.param === 'tool_choice',
  );
  await assert.rejects(
    openai.chat.completions.create({ model, messages: ask, extra: 1, guided_regex: '(?=x)' }),
    (e) => e instanceof OpenAI.BadRequestError && e.param === 'guided_regex',
  );
  if (gateway) {
    await assert.rejects(client('sk-wrong').chat.completions.create({ model, messages: ask }), (e) => e instanceof OpenAI.AuthenticationError);
    await assert.rejects(
      openai.chat.completions.create({ model: env('AICLOUD_OTHER_MODEL'), messages: ask }),
      (e) => e instanceof OpenAI.PermissionDeniedError,
    );
  }
});
