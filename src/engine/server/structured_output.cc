#include "engine/server/structured_output.h"

#include <cctype>
#include <chrono>
#include <string>
#include <utility>

#include "engine/structured/grammar.h"
#include "engine/structured/regex.h"

namespace aicloud::engine {
namespace {

using nlohmann::ordered_json;
using structured::Pattern;

Status Bad(const std::string& param, const std::string& what) { return InvalidArgumentError(param + ": " + what); }

// "#/pointer: problem" from the schema compiler becomes "field#/pointer: problem", anything
// else "field: problem", so error.param names the request field.
Status InField(const std::string& field, const Status& s) {
  std::string m(s.message());
  if (m.starts_with("#")) return Status(s.code(), field + m);  // "#/properties/x: ..."
  return Status(s.code(), field + ": " + m);
}

bool ValidToolName(const std::string& n) {
  if (n.empty() || n.size() > 64) return false;
  for (char c : n) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '-') return false;
  }
  return true;
}

}  // namespace

// --- GrammarCache ------------------------------------------------------------------------------

GrammarCache::GrammarCache(std::shared_ptr<const structured::TokenVocabulary> vocab, size_t capacity)
    : vocab_(std::move(vocab)), capacity_(std::max<size_t>(capacity, 1)) {}

StatusOr<std::shared_ptr<structured::TokenGrammar>> GrammarCache::Get(
    const std::string& key, const std::function<StatusOr<Pattern>()>& build) {
  {
    std::lock_guard<std::mutex> l(mu_);
    if (auto it = index_.find(key); it != index_.end()) {
      if (it->second->second->status().ok()) {
        lru_.splice(lru_.begin(), lru_, it->second);
        ++hits_;
        if (lookups_) lookups_->Inc({"hit"});
        return it->second->second;
      }
      // Its automaton outgrew its limits and now fails closed for everyone holding it; later
      // requests get a fresh one.
      lru_.erase(it->second);
      index_.erase(it);
    }
    ++misses_;
  }
  // Compiled outside the lock: two requests racing on a new schema both compile it, and the
  // second one's result is dropped.
  const auto t0 = std::chrono::steady_clock::now();
  auto failed = [&](Status s) {
    if (lookups_) lookups_->Inc({"error"});
    return s;
  };
  StatusOr<Pattern> p = build();
  if (!p.ok()) return failed(p.status());
  StatusOr<std::shared_ptr<structured::ByteAutomaton>> a = structured::ByteAutomaton::Compile(*p);
  if (!a.ok()) return failed(a.status());
  StatusOr<std::shared_ptr<structured::TokenGrammar>> g = structured::TokenGrammar::Create(std::move(*a), vocab_);
  if (!g.ok()) return failed(g.status());
  if (lookups_) lookups_->Inc({"miss"});
  if (compile_seconds_) {
    compile_seconds_->Observe(LabelValues{}, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  std::lock_guard<std::mutex> l(mu_);
  if (auto it = index_.find(key); it != index_.end()) return it->second->second;
  lru_.emplace_front(key, *g);
  index_[key] = lru_.begin();
  while (lru_.size() > capacity_) {
    index_.erase(lru_.back().first);
    lru_.pop_back();
  }
  return *g;
}

int64_t GrammarCache::hits() const {
  std::lock_guard<std::mutex> l(mu_);
  return hits_;
}

int64_t GrammarCache::misses() const {
  std::lock_guard<std::mutex> l(mu_);
  return misses_;
}

// --- response_format and guided_* ---------------------------------------------------------------

std::string_view OutputConstraint::KindName(Kind kind) {
  switch (kind) {
    case Kind::kJsonObject:
      return "json_object";
    case Kind::kJsonSchema:
      return "json_schema";
    case Kind::kRegex:
      return "regex";
    case Kind::kChoice:
      return "choice";
    case Kind::kNone:
      break;
  }
  return "";
}

StatusOr<OutputConstraint> ParseOutputConstraint(const ordered_json& b) {
  OutputConstraint c;
  auto take = [&](OutputConstraint::Kind kind, const char* field) -> Status {
    if (c.kind != OutputConstraint::Kind::kNone) {
      return Bad(field, "only one of response_format, guided_json, guided_regex and guided_choice may constrain the output (" +
                            c.field + " is given too)");
    }
    c.kind = kind;
    c.field = field;
    return OkStatus();
  };
  if (auto rf = b.find("response_format"); rf != b.end() && !rf->is_null()) {
    if (!rf->is_object() || !rf->contains("type") || !(*rf)["type"].is_string()) {
      return Bad("response_format", "must be an object with a type: \"text\", \"json_object\" or \"json_schema\"");
    }
    const std::string type = (*rf)["type"];
    if (type == "json_object") {
      AICLOUD_RETURN_IF_ERROR(take(OutputConstraint::Kind::kJsonObject, "response_format"));
    } else if (type == "json_schema") {
      auto js = rf->find("json_schema");
      if (js == rf->end() || !js->is_object()) return Bad("response_format.json_schema", "required, an object");
      if (auto name = js->find("name"); name != js->end() && !(name->is_string() && ValidToolName(name->get<std::string>()))) {
        return Bad("response_format.json_schema.name", "must be 1 to 64 of a-z, A-Z, 0-9, _ and -");
      }
      if (auto st = js->find("strict"); st != js->end() && !st->is_null() && !st->is_boolean()) {
        return Bad("response_format.json_schema.strict", "must be true or false");
      }
      auto schema = js->find("schema");
      if (schema == js->end() || schema->is_null()) {
        AICLOUD_RETURN_IF_ERROR(take(OutputConstraint::Kind::kJsonObject, "response_format"));
      } else {
        if (!schema->is_object()) return Bad("response_format.json_schema.schema", "must be a JSON schema object");
        AICLOUD_RETURN_IF_ERROR(take(OutputConstraint::Kind::kJsonSchema, "response_format.json_schema.schema"));
        c.schema = *schema;
      }
    } else if (type != "text") {
      return Bad("response_format.type", "must be \"text\", \"json_object\" or \"json_schema\", got \"" + type + "\"");
    }
  }
  if (auto gj = b.find("guided_json"); gj != b.end() && !gj->is_null()) {
    AICLOUD_RETURN_IF_ERROR(take(OutputConstraint::Kind::kJsonSchema, "guided_json"));
    if (gj->is_string()) {
      ordered_json parsed = ordered_json::parse(gj->get<std::string>(), nullptr, false);
      if (parsed.is_discarded()) return Bad("guided_json", "not valid JSON");
      c.schema = std::move(parsed);
    } else {
      c.schema = *gj;
    }
    if (!c.schema.is_object()) return Bad("guided_json", "must be a JSON schema object");
  }
  if (auto gr = b.find("guided_regex"); gr != b.end() && !gr->is_null()) {
    AICLOUD_RETURN_IF_ERROR(take(OutputConstraint::Kind::kRegex, "guided_regex"));
    if (!gr->is_string() || gr->get<std::string>().empty()) return Bad("guided_regex", "must be a non-empty string");
    c.regex = *gr;
  }
  if (auto gc = b.find("guided_choice"); gc != b.end() && !gc->is_null()) {
    AICLOUD_RETURN_IF_ERROR(take(OutputConstraint::Kind::kChoice, "guided_choice"));
    if (!gc->is_array() || gc->empty()) return Bad("guided_choice", "must be a non-empty list of strings");
    if (gc->size() > 1024) return Bad("guided_choice", "at most 1024 choices");
    for (const ordered_json& x : *gc) {
      if (!x.is_string() || x.get<std::string>().empty()) return Bad("guided_choice", "must be a non-empty list of non-empty strings");
      c.choices.push_back(x);
    }
  }
  return c;
}

StatusOr<std::shared_ptr<structured::TokenGrammar>> ConstraintGrammar(const OutputConstraint& c, GrammarCache& cache) {
  switch (c.kind) {
    case OutputConstraint::Kind::kNone:
      return std::shared_ptr<structured::TokenGrammar>();
    case OutputConstraint::Kind::kJsonObject:
      return cache.Get("json_object", [] { return StatusOr<Pattern>(structured::AnyJsonObject()); });
    case OutputConstraint::Kind::kJsonSchema: {
      StatusOr<std::shared_ptr<structured::TokenGrammar>> g =
          cache.Get("json_schema\n" + c.schema.dump(), [&] { return structured::JsonSchemaPattern(c.schema); });
      if (!g.ok()) return InField(c.field, g.status());
      return g;
    }
    case OutputConstraint::Kind::kRegex: {
      StatusOr<std::shared_ptr<structured::TokenGrammar>> g =
          cache.Get("regex\n" + c.regex, [&] { return structured::ParseRegex(c.regex); });
      if (!g.ok()) return InField(c.field, g.status());
      return g;
    }
    case OutputConstraint::Kind::kChoice: {
      std::string key = "choice";
      for (const std::string& s : c.choices) key += "\n" + ordered_json(s).dump();
      StatusOr<std::shared_ptr<structured::TokenGrammar>> g = cache.Get(key, [&] {
        std::vector<Pattern> options;
        for (const std::string& s : c.choices) options.push_back(structured::Literal(s));
        return StatusOr<Pattern>(structured::Alternate(std::move(options)));
      });
      if (!g.ok()) return InField(c.field, g.status());
      return g;
    }
  }
  return InternalError("unknown output constraint");
}

// --- tools ---------------------------------------------------------------------------------------

StatusOr<ToolRequest> ParseToolRequest(const ordered_json& b) {
  ToolRequest r;
  if (auto t = b.find("tools"); t != b.end() && !t->is_null()) {
    if (!t->is_array()) return Bad("tools", "must be a list of function tools");
    if (t->size() > 128) return Bad("tools", "at most 128 tools");
    for (size_t i = 0; i < t->size(); ++i) {
      const ordered_json& x = (*t)[i];
      const std::string at = "tools[" + std::to_string(i) + "]";
      if (!x.is_object()) return Bad(at, "must be an object");
      if (!x.contains("type") || x["type"] != "function") return Bad(at + ".type", "only \"function\" tools are supported");
      auto f = x.find("function");
      if (f == x.end() || !f->is_object()) return Bad(at + ".function", "required, an object");
      auto name = f->find("name");
      if (name == f->end() || !name->is_string() || !ValidToolName(name->get<std::string>())) {
        return Bad(at + ".function.name", "required, 1 to 64 of a-z, A-Z, 0-9, _ and -");
      }
      FunctionTool tool;
      tool.name = *name;
      for (const FunctionTool& other : r.tools) {
        if (other.name == tool.name) return Bad(at + ".function.name", "\"" + tool.name + "\" is given twice");
      }
      if (auto p = f->find("parameters"); p != f->end() && !p->is_null()) {
        if (!p->is_object()) return Bad(at + ".function.parameters", "must be a JSON schema object");
        tool.parameters = *p;
      }
      tool.raw = x;
      r.tools.push_back(std::move(tool));
    }
  }
  r.mode = r.tools.empty() ? ToolChoiceMode::kNone : ToolChoiceMode::kAuto;
  if (auto tc = b.find("tool_choice"); tc != b.end() && !tc->is_null()) {
    if (r.tools.empty()) return Bad("tool_choice", "is only allowed when tools are given");
    if (tc->is_string()) {
      const std::string v = *tc;
      if (v == "none") {
        r.mode = ToolChoiceMode::kNone;
      } else if (v == "auto") {
        r.mode = ToolChoiceMode::kAuto;
      } else if (v == "required") {
        r.mode = ToolChoiceMode::kRequired;
      } else {
        return Bad("tool_choice", "must be \"none\", \"auto\", \"required\" or {\"type\": \"function\", \"function\": {\"name\": ...}}");
      }
    } else if (tc->is_object() && tc->contains("type") && (*tc)["type"] == "function" && tc->contains("function") &&
               (*tc)["function"].is_object() && (*tc)["function"].contains("name") && (*tc)["function"]["name"].is_string()) {
      r.mode = ToolChoiceMode::kNamed;
      r.named = (*tc)["function"]["name"];
      bool found = false;
      for (const FunctionTool& t : r.tools) found |= t.name == r.named;
      if (!found) return Bad("tool_choice", "no tool named \"" + r.named + "\" is in tools");
    } else {
      return Bad("tool_choice", "must be \"none\", \"auto\", \"required\" or {\"type\": \"function\", \"function\": {\"name\": ...}}");
    }
  }
  if (auto p = b.find("parallel_tool_calls"); p != b.end() && !p->is_null()) {
    if (!p->is_boolean()) return Bad("parallel_tool_calls", "must be true or false");
    r.parallel = *p;
  }
  return r;
}

StatusOr<std::shared_ptr<structured::TokenGrammar>> ToolCallGrammar(const ToolRequest& tr, ToolCallFormat format,
                                                                    GrammarCache& cache) {
  const bool hermes = format == ToolCallFormat::kHermes;
  const bool parallel = tr.parallel && tr.mode == ToolChoiceMode::kRequired;
  std::string key = std::string(hermes ? "tools/hermes" : "tools/llama3") + (parallel ? "/parallel" : "/one");
  std::vector<size_t> chosen;
  for (size_t i = 0; i < tr.tools.size(); ++i) {
    if (tr.mode == ToolChoiceMode::kRequired || tr.tools[i].name == tr.named) chosen.push_back(i);
  }
  for (size_t i : chosen) key += "\n" + tr.tools[i].name + "\n" + tr.tools[i].parameters.dump();
  StatusOr<std::shared_ptr<structured::TokenGrammar>> g = cache.Get(key, [&]() -> StatusOr<Pattern> {
    std::vector<Pattern> calls;
    for (size_t i : chosen) {
      const FunctionTool& t = tr.tools[i];
      Pattern args = structured::Literal("{}");
      if (!t.parameters.is_null()) {
        StatusOr<Pattern> p = structured::JsonSchemaPattern(t.parameters);
        if (!p.ok()) return InField("tools[" + std::to_string(i) + "].function.parameters", p.status());
        args = *p;
      }
      if (hermes) {
        calls.push_back(structured::Concat({structured::Literal("<tool_call>\n{\"name\": \"" + t.name + "\", \"arguments\": "),
                                            args, structured::Literal("}\n</tool_call>")}));
      } else {
        calls.push_back(structured::Concat(
            {structured::Literal("{\"name\": \"" + t.name + "\", \"parameters\": "), args, structured::Literal("}")}));
      }
    }
    Pattern one = structured::Alternate(std::move(calls));
    if (!parallel) return one;
    return structured::Concat(
        {one, structured::Repeat(structured::Concat({structured::Literal(hermes ? "\n" : "; "), one}), 0, -1)});
  });
  // Schema errors name their tool already; the automaton's own limits are the tool_choice's.
  if (!g.ok() && !g.status().message().starts_with("tools[")) return InField("tool_choice", g.status());
  return g;
}

}  // namespace aicloud::engine
