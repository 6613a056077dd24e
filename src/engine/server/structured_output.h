// Structured output for the OpenAI API: turns a request's `response_format`, vLLM's
// `guided_json` / `guided_regex` / `guided_choice`, and a `tool_choice` of "required" or a named
// function into the grammar its tokens are drawn under (engine/structured/), compiled once per
// distinct constraint and shared by every request that uses it.
//
//   GrammarCache cache(TokenVocabulary::Build(tokenizer, model_vocab, eos_ids));
//   StatusOr<std::shared_ptr<TokenGrammar>> g = cache.Get(
//       "json_schema\n" + schema.dump(), [&] { return JsonSchemaPattern(schema); });
//   request.sampling.grammar = *g;       // the sampler masks every step with it
//
// Tool calls are forced in the chat template's own format, the text a model trained on that
// template writes and ToolCallStreamParser (tool_calls.h) reads back:
//   Hermes (ChatML):  <tool_call>\n{"name": "NAME", "arguments": ARGS}\n</tool_call>
//                     (several joined by "\n" when parallel_tool_calls)
//   Llama-3 JSON:     {"name": "NAME", "parameters": ARGS}   (several joined by "; ")
// where ARGS follows the function's `parameters` schema ("{}" when it has none).
//
// Thread-safety: GrammarCache is thread-safe (HTTP workers compile, the engine loop masks).
#pragma once

#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/metrics.h"
#include "core/status.h"
#include "engine/structured/json_schema.h"
#include "engine/structured/pattern.h"
#include "engine/structured/token_grammar.h"
#include "engine/tokenizer/chat_template.h"

namespace aicloud::engine {

class GrammarCache {
 public:
  explicit GrammarCache(std::shared_ptr<const structured::TokenVocabulary> vocab, size_t capacity = 64);

  // The grammar for `key`, built with `build` on a miss (the error of `build` or of compiling
  // on failure, nothing cached then). The least recently used grammar beyond `capacity` is
  // dropped (requests holding it keep it alive).
  StatusOr<std::shared_ptr<structured::TokenGrammar>> Get(
      const std::string& key, const std::function<StatusOr<structured::Pattern>()>& build);

  const structured::TokenVocabulary& vocabulary() const { return *vocab_; }
  int64_t hits() const;
  int64_t misses() const;
  // Where lookups (label "result": hit, miss, error) and compile times are counted; either may
  // be null. Set before the cache is shared.
  void SetMetrics(Counter* lookups, Histogram* compile_seconds) {
    lookups_ = lookups;
    compile_seconds_ = compile_seconds;
  }

 private:
  std::shared_ptr<const structured::TokenVocabulary> vocab_;
  const size_t capacity_;
  mutable std::mutex mu_;
  std::list<std::pair<std::string, std::shared_ptr<structured::TokenGrammar>>> lru_;  // most recent first
  std::unordered_map<std::string, decltype(lru_)::iterator> index_;
  int64_t hits_ = 0, misses_ = 0;
  Counter* lookups_ = nullptr;
  Histogram* compile_seconds_ = nullptr;
};

// What the client asked the output to be; kNone = free text.
struct OutputConstraint {
  enum class Kind { kNone, kJsonObject, kJsonSchema, kRegex, kChoice };
  // "json_object", "json_schema", "regex", "choice" (metric labels); "" for kNone.
  static std::string_view KindName(Kind kind);
  Kind kind = Kind::kNone;
  std::string field;               // the request field it came from, for errors
  nlohmann::ordered_json schema;   // kJsonSchema
  std::string regex;               // kRegex
  std::vector<std::string> choices;  // kChoice
};

// Reads response_format, guided_json, guided_regex and guided_choice (at most one of them may
// constrain). INVALID_ARGUMENT "field: problem" for malformed values.
StatusOr<OutputConstraint> ParseOutputConstraint(const nlohmann::ordered_json& body);

// The grammar of a constraint (kNone: nullptr). Schema and regex errors name the field.
StatusOr<std::shared_ptr<structured::TokenGrammar>> ConstraintGrammar(const OutputConstraint& c, GrammarCache& cache);

// A function tool of a request, as `tools[i]` gave it.
struct FunctionTool {
  std::string name;
  nlohmann::ordered_json parameters;  // null when the tool takes none
  nlohmann::ordered_json raw;         // the whole tools[i] object, for the chat template
};

enum class ToolChoiceMode { kNone, kAuto, kRequired, kNamed };

struct ToolRequest {
  std::vector<FunctionTool> tools;
  ToolChoiceMode mode = ToolChoiceMode::kNone;
  std::string named;  // kNamed
  bool parallel = true;
};

// Reads tools, tool_choice and parallel_tool_calls. Defaults as OpenAI's: tool_choice "auto"
// with tools, "none" without; tool_choice without tools is refused.
StatusOr<ToolRequest> ParseToolRequest(const nlohmann::ordered_json& body);

// The grammar forcing one call (or, with parallel, one or more) of the named tool or any tool,
// in `format`. REQUIRES: mode is kRequired or kNamed.
StatusOr<std::shared_ptr<structured::TokenGrammar>> ToolCallGrammar(const ToolRequest& tools, ToolCallFormat format,
                                                                    GrammarCache& cache);

}  // namespace aicloud::engine
