// JSON schema -> Pattern: the text a constrained request may produce for OpenAI
// `response_format` (json_schema, json_object), vLLM `guided_json` and tool-call arguments.
//
//   nlohmann::ordered_json schema = nlohmann::ordered_json::parse(request_schema_text);
//   StatusOr<Pattern> p = JsonSchemaPattern(schema);
//   if (!p.ok()) return p.status();   // "#/properties/id: keyword 'oneOf' is not supported"
//   StatusOr<std::shared_ptr<ByteAutomaton>> a = ByteAutomaton::Compile(*p);
//
// Every text the pattern accepts is JSON that validates against the schema. It is a subset of
// all valid texts: properties are written in the schema's key order, only declared properties
// are written, strings use the escapes below, and whitespace between tokens is bounded.
//
// Supported keywords:
//   type            string, number, integer, boolean, null, object, array, or an array of them
//                   (["string", "null"]); without `type` the kinds are inferred from the other
//                   keywords, and a schema with none of them is any JSON value;
//   properties, required, additionalProperties
//                   declared properties only, in key order; optional ones may be left out (the
//                   commas stay right for every subset). An object schema without properties
//                   is a free-form object unless additionalProperties is false (then `{}`) or
//                   a schema (then an object whose every value follows that schema);
//   enum, const     any JSON values, written as canonical JSON (filtered by `type` if given);
//   items, minItems, maxItems;
//   anyOf, allOf with one schema, $ref to "#/$defs/X" or "#/definitions/X" (not recursive);
//   pattern         ParseRegex (regex.h), matched against the whole string;
//   minLength, maxLength   in code points (an escape counts as one), at most kMaxJsonStringLength;
//   nullable        true adds null; false is ignored;
//   annotations     title, description, default, examples, deprecated, readOnly, writeOnly,
//                   $schema, $id, $comment, strict, and $defs/definitions as containers.
// Everything else (oneOf, not, if/then/else, allOf with more than one schema,
// patternProperties, format, minimum/maximum/exclusive*, multipleOf, uniqueItems, contains,
// prefixItems, dependent*, unevaluated*, propertyNames, min/maxProperties, unknown keywords)
// is refused with INVALID_ARGUMENT "<path>: keyword 'X' is not supported", path a JSON pointer
// ("#" is the root). Nothing is silently ignored.
//
// Grammar at byte level:
//   string  " then any code point except " \ and U+0000..U+001F (as UTF-8), or the escapes
//           \" \\ \/ \b \f \n \r \t \uXXXX (no lone surrogates: a high one must be followed by
//           a low one), then "
//   number  -?(0|[1-9][0-9]{0,18})(\.[0-9]{1,19})?([eE][+-]?[0-9]{1,2})?
//   integer -?(0|[1-9][0-9]{0,18})
//           (digit runs are bounded: a model cannot loop on digits, and every number parses
//           to a finite double; larger numbers are valid JSON that this grammar never writes)
//   ws      between tokens: at most one \n followed by at most max_whitespace spaces or tabs;
//           never required, never unbounded (a model cannot loop on whitespace).
//
// Limits (INVALID_ARGUMENT naming the limit): kMaxSchemaValues values in the schema,
// kMaxSchemaDepth nested subschemas ($ref targets count where they are used), maxItems,
// minItems and string lengths up to kMaxJsonStringLength / kMaxJsonItems, and a pattern of at
// most kMaxSchemaPatternSize estimated automaton states.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "engine/structured/pattern.h"

namespace aicloud::engine::structured {

inline constexpr int32_t kMaxSchemaValues = 20'000;
inline constexpr int32_t kMaxSchemaDepth = 64;
inline constexpr int32_t kMaxJsonStringLength = 1000;
inline constexpr int32_t kMaxJsonItems = 1000;
inline constexpr int64_t kMaxSchemaPatternSize = 200'000;
inline constexpr int32_t kMaxJsonDigits = 19;

struct JsonSchemaOptions {
  // Spaces or tabs allowed after the optional newline between two JSON tokens. 0: compact
  // output only (no whitespace at all).
  int32_t max_whitespace = 16;
  // How deep free-form JSON may nest (json_object mode, `{}` schemas, objects without
  // properties): 1 allows {"a": 1}, 2 allows {"a": {"b": [1]}}.
  int32_t any_json_depth = 3;
};

StatusOr<Pattern> JsonSchemaPattern(const nlohmann::ordered_json& schema,
                                    const JsonSchemaOptions& options = {});

// json_object mode: any JSON object, nested at most options.any_json_depth deep.
Pattern AnyJsonObject(const JsonSchemaOptions& options = {});
// Any JSON value nested at most `depth` deep (scalars at 0).
Pattern AnyJsonValue(int32_t depth, const JsonSchemaOptions& options = {});
// The canonical JSON text of `value` (nlohmann's compact dump; invalid UTF-8 becomes U+FFFD).
Pattern JsonValueLiteral(const nlohmann::ordered_json& value);

// Building blocks, exposed for tool-call grammars and tests.
Pattern JsonWhitespace(const JsonSchemaOptions& options = {});
// A JSON string whose decoded value has between min_length and max_length (-1: any) code points.
Pattern JsonString(int32_t min_length = 0, int32_t max_length = -1);
// A JSON string whose decoded value matches `value`: the bytes `"` `\` and controls in the
// value's language are written as their JSON escapes.
Pattern JsonStringMatching(const Pattern& value);
Pattern JsonNumber();
Pattern JsonInteger();

}  // namespace aicloud::engine::structured
