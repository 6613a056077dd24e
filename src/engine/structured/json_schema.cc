#include "engine/structured/json_schema.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "engine/structured/regex.h"

namespace aicloud::engine::structured {
namespace {

using Json = nlohmann::ordered_json;

Pattern Chars(std::string_view chars) {
  std::bitset<256> set;
  for (char c : chars) set.set(static_cast<uint8_t>(c));
  return ByteSet(set);
}

Pattern Hex() { return Chars("0123456789abcdefABCDEF"); }

// One character of a JSON string's text: a plain code point or an escape.
Pattern StringChar() {
  static const Pattern p = [] {
    Pattern plain = CodepointClass({{0x20, 0x21}, {0x23, 0x5B}, {0x5D, 0x10FFFF}}, false);
    Pattern hex = Hex();
    // \uXXXX without surrogates, or a high surrogate escape followed by a low one.
    Pattern bmp = Alternate({Concat({Chars("0123456789abcABCefEF"), Repeat(hex, 3, 3)}),
                             Concat({Chars("dD"), ByteRange('0', '7'), Repeat(hex, 2, 2)})});
    Pattern pair = Concat({Chars("dD"), Chars("89abAB"), Repeat(hex, 2, 2), Literal("\\u"),
                           Chars("dD"), Chars("cdefCDEF"), Repeat(hex, 2, 2)});
    Pattern escape = Concat({Literal("\\"), Alternate({Chars("\"\\/bfnrt"),
                                                       Concat({Literal("u"), bmp}),
                                                       Concat({Literal("u"), pair})})});
    return Alternate({plain, escape});
  }();
  return p;
}

std::string EscapeByte(uint8_t b) {
  switch (b) {
    case '"': return "\\\"";
    case '\\': return "\\\\";
    case '\n': return "\\n";
    case '\t': return "\\t";
    case '\r': return "\\r";
    case '\b': return "\\b";
    case '\f': return "\\f";
    default: break;
  }
  static const char kHex[] = "0123456789abcdef";
  return std::string("\\u00") + kHex[b >> 4] + kHex[b & 15];
}

bool NeedsEscape(uint8_t b) { return b < 0x20 || b == '"' || b == '\\'; }

// Rewrites a pattern over a string's value into one over its JSON-escaped text. Correct on
// bytes because every byte that needs escaping is ASCII, so never part of a longer character.
Pattern EscapeForJson(const Pattern& p) {
  using Kind = PatternNode::Kind;
  switch (p->kind) {
    case Kind::kEmpty:
      return p;
    case Kind::kBytes: {
      std::string out;
      for (char c : p->bytes) {
        const auto b = static_cast<uint8_t>(c);
        out += NeedsEscape(b) ? EscapeByte(b) : std::string(1, c);
      }
      return Literal(out);
    }
    case Kind::kByteSet: {
      std::bitset<256> plain = p->set;
      std::vector<Pattern> options;
      for (int b = 0; b < 256; ++b) {
        if (p->set.test(b) && NeedsEscape(static_cast<uint8_t>(b))) {
          plain.reset(b);
          options.push_back(Literal(EscapeByte(static_cast<uint8_t>(b))));
        }
      }
      if (options.empty()) return p;
      if (plain.any()) options.insert(options.begin(), ByteSet(plain));
      return Alternate(std::move(options));
    }
    case Kind::kConcat:
    case Kind::kAlternate: {
      std::vector<Pattern> children;
      for (const Pattern& c : p->children) children.push_back(EscapeForJson(c));
      return p->kind == Kind::kConcat ? Concat(std::move(children))
                                      : Alternate(std::move(children));
    }
    case Kind::kRepeat:
      return Repeat(EscapeForJson(p->children[0]), p->min, p->max);
    case Kind::kSubsequence: {
      std::vector<Pattern> children;
      for (const Pattern& c : p->children) children.push_back(EscapeForJson(c));
      return Subsequence(std::move(children), p->required, EscapeForJson(p->separator));
    }
  }
  return p;
}

const std::set<std::string, std::less<>>& Annotations() {
  static const std::set<std::string, std::less<>> s = {
      "title", "description", "default", "examples", "deprecated", "readOnly", "writeOnly",
      "$schema", "$id", "$comment", "strict", "$defs", "definitions"};
  return s;
}

const std::set<std::string, std::less<>>& Supported() {
  static const std::set<std::string, std::less<>> s = {
      "type",  "properties", "required", "additionalProperties", "enum", "const",
      "items", "minItems",   "maxItems", "anyOf", "allOf", "$ref", "pattern",
      "minLength", "maxLength", "nullable"};
  return s;
}

std::string PointerEscape(std::string_view key) {
  std::string out;
  for (char c : key) {
    if (c == '~') out += "~0";
    else if (c == '/') out += "~1";
    else out += c;
  }
  return out;
}

// Values in `j`, counted without recursion (the schema may be nested arbitrarily deep);
// stops counting past `limit`.
int32_t CountValues(const Json& j, int32_t limit) {
  std::vector<const Json*> stack = {&j};
  int32_t n = 0;
  while (!stack.empty() && n <= limit) {
    const Json* v = stack.back();
    stack.pop_back();
    ++n;
    if (v->is_structured()) {
      for (const auto& child : *v) stack.push_back(&child);
    }
  }
  return n;
}

bool HasType(const Json& v, std::string_view type) {
  if (type == "null") return v.is_null();
  if (type == "boolean") return v.is_boolean();
  if (type == "string") return v.is_string();
  if (type == "object") return v.is_object();
  if (type == "array") return v.is_array();
  if (type == "number") return v.is_number();
  if (type == "integer") {
    if (v.is_number_integer()) return true;
    if (!v.is_number_float()) return false;
    const double d = v.get<double>();
    return std::isfinite(d) && d == std::floor(d);
  }
  return false;
}

class SchemaCompiler {
 public:
  SchemaCompiler(const Json& root, const JsonSchemaOptions& options)
      : root_(root), options_(options), ws_(JsonWhitespace(options)) {}

  StatusOr<Pattern> Compile(const Json& s, const std::string& path, int32_t depth) {
    if (depth > kMaxSchemaDepth) {
      return Fail(path, "subschemas nest deeper than " + std::to_string(kMaxSchemaDepth) +
                            " levels (the limit)");
    }
    StatusOr<Pattern> p = CompileNode(s, path, depth);
    if (p.ok() && (*p)->size > kMaxSchemaPatternSize) {
      return Fail(path, "the schema needs about " + std::to_string((*p)->size) +
                            " automaton states; the limit is " +
                            std::to_string(kMaxSchemaPatternSize));
    }
    return p;
  }

 private:
  static Status Fail(const std::string& path, const std::string& message) {
    return InvalidArgumentError(path + ": " + message);
  }

  // Any key other than annotations and `allowed` is refused.
  static Status OnlyAlongside(const Json& s, const std::string& path, std::string_view main,
                              const std::set<std::string, std::less<>>& allowed) {
    for (const auto& [key, _] : s.items()) {
      if (key == main || Annotations().contains(key) || allowed.contains(key)) continue;
      return Fail(path, "keyword '" + key + "' alongside '" + std::string(main) +
                            "' is not supported");
    }
    return OkStatus();
  }

  Pattern Ws() const { return ws_; }

  StatusOr<Pattern> CompileNode(const Json& s, const std::string& path, int32_t depth) {
    if (s.is_boolean()) {
      if (s.get<bool>()) return AnyJsonValue(options_.any_json_depth, options_);
      return Fail(path, "the schema false matches nothing");
    }
    if (!s.is_object()) return Fail(path, "a schema must be an object or a boolean");
    for (const auto& [key, _] : s.items()) {
      if (!Annotations().contains(key) && !Supported().contains(key)) {
        return Fail(path, "keyword '" + key + "' is not supported");
      }
    }
    if (s.contains("$ref")) return CompileRef(s, path, depth);
    if (s.contains("anyOf")) return CompileAnyOf(s, path, depth);
    if (s.contains("allOf")) {
      AICLOUD_RETURN_IF_ERROR(OnlyAlongside(s, path, "allOf", {}));
      const Json& all = s["allOf"];
      if (!all.is_array() || all.size() != 1) {
        return Fail(path, "keyword 'allOf' with other than one schema is not supported");
      }
      return Compile(all[0], path + "/allOf/0", depth + 1);
    }
    std::vector<std::string> types;
    AICLOUD_RETURN_IF_ERROR(ReadTypes(s, path, &types));
    if (s.contains("enum") || s.contains("const")) return CompileEnum(s, path, types);
    if (types.empty()) return AnyJsonValue(options_.any_json_depth, options_);
    std::vector<Pattern> options;
    for (const std::string& t : types) {
      StatusOr<Pattern> p = CompileType(s, path, t, depth);
      if (!p.ok()) return p;
      options.push_back(std::move(*p));
    }
    return Alternate(std::move(options));
  }

  Status ReadTypes(const Json& s, const std::string& path, std::vector<std::string>* types) {
    static const std::set<std::string, std::less<>> kTypes = {
        "string", "number", "integer", "boolean", "null", "object", "array"};
    if (s.contains("type")) {
      const Json& t = s["type"];
      std::vector<Json> list = t.is_array() ? std::vector<Json>(t.begin(), t.end())
                                            : std::vector<Json>{t};
      if (list.empty()) return Fail(path + "/type", "an empty type list matches nothing");
      for (const Json& one : list) {
        if (!one.is_string() || !kTypes.contains(one.get<std::string>())) {
          return Fail(path + "/type", "unknown type " + one.dump());
        }
        const std::string name = one.get<std::string>();
        if (std::find(types->begin(), types->end(), name) == types->end()) types->push_back(name);
      }
    } else if (!s.contains("enum") && !s.contains("const")) {
      auto any_of = [&](std::initializer_list<const char*> keys) {
        for (const char* k : keys) {
          if (s.contains(k)) return true;
        }
        return false;
      };
      if (any_of({"properties", "required", "additionalProperties"})) types->push_back("object");
      if (any_of({"items", "minItems", "maxItems"})) types->push_back("array");
      if (any_of({"pattern", "minLength", "maxLength"})) types->push_back("string");
    }
    if (s.contains("nullable")) {
      if (!s["nullable"].is_boolean()) return Fail(path + "/nullable", "must be a boolean");
      if (s["nullable"].get<bool>() && !types->empty() &&
          std::find(types->begin(), types->end(), "null") == types->end()) {
        types->push_back("null");
      }
    }
    return OkStatus();
  }

  StatusOr<Pattern> CompileRef(const Json& s, const std::string& path, int32_t depth) {
    AICLOUD_RETURN_IF_ERROR(OnlyAlongside(s, path, "$ref", {}));
    if (!s["$ref"].is_string()) return Fail(path + "/$ref", "must be a string");
    const std::string ref = s["$ref"].get<std::string>();
    if (!ref.starts_with("#/$defs/") && !ref.starts_with("#/definitions/")) {
      if (ref == "#") return Fail(path, "recursive $ref '#' is not supported");
      return Fail(path, "$ref '" + ref +
                            "' is not supported (only #/$defs/... and #/definitions/...)");
    }
    if (std::find(ref_stack_.begin(), ref_stack_.end(), ref) != ref_stack_.end()) {
      return Fail(path, "recursive $ref '" + ref + "' is not supported");
    }
    const Json* target = &root_;
    size_t pos = 2;
    while (pos <= ref.size()) {
      const size_t slash = std::min(ref.find('/', pos), ref.size());
      std::string token = ref.substr(pos, slash - pos);
      for (size_t i = 0; (i = token.find('~', i)) != std::string::npos; ++i) {
        if (i + 1 < token.size() && token[i + 1] == '0') token.replace(i, 2, "~");
        else if (i + 1 < token.size() && token[i + 1] == '1') token.replace(i, 2, "/");
      }
      if (!target->is_object() || !target->contains(token)) {
        return Fail(path, "$ref '" + ref + "' points at nothing");
      }
      target = &(*target)[token];
      pos = slash + 1;
    }
    ref_stack_.push_back(ref);
    StatusOr<Pattern> p = Compile(*target, ref, depth + 1);
    ref_stack_.pop_back();
    return p;
  }

  StatusOr<Pattern> CompileAnyOf(const Json& s, const std::string& path, int32_t depth) {
    AICLOUD_RETURN_IF_ERROR(OnlyAlongside(s, path, "anyOf", {}));
    const Json& any = s["anyOf"];
    if (!any.is_array() || any.empty()) return Fail(path + "/anyOf", "must be a non-empty array");
    std::vector<Pattern> options;
    for (size_t i = 0; i < any.size(); ++i) {
      StatusOr<Pattern> p = Compile(any[i], path + "/anyOf/" + std::to_string(i), depth + 1);
      if (!p.ok()) return p;
      options.push_back(std::move(*p));
    }
    return Alternate(std::move(options));
  }

  StatusOr<Pattern> CompileEnum(const Json& s, const std::string& path,
                                const std::vector<std::string>& types) {
    const char* main = s.contains("const") ? "const" : "enum";
    AICLOUD_RETURN_IF_ERROR(OnlyAlongside(s, path, main, {"type", "nullable"}));
    std::vector<Json> values;
    if (s.contains("const")) {
      values.push_back(s["const"]);
    } else {
      if (!s["enum"].is_array() || s["enum"].empty()) {
        return Fail(path + "/enum", "must be a non-empty array");
      }
      values.assign(s["enum"].begin(), s["enum"].end());
    }
    std::vector<Pattern> options;
    for (const Json& v : values) {
      const bool typed = types.empty() || std::any_of(types.begin(), types.end(), [&](auto& t) {
                           return HasType(v, t);
                         });
      if (typed) options.push_back(JsonValueLiteral(v));
    }
    if (options.empty()) return Fail(path, "no " + std::string(main) + " value has the schema's type");
    return Alternate(std::move(options));
  }

  StatusOr<int32_t> ReadCount(const Json& s, const std::string& path, const char* key,
                              int32_t limit, int32_t absent) {
    if (!s.contains(key)) return absent;
    const Json& v = s[key];
    if (!v.is_number_integer() || v.get<int64_t>() < 0) {
      return Fail(path + "/" + key, "must be a non-negative integer");
    }
    if (v.get<int64_t>() > limit) {
      return Fail(path + "/" + key, std::string(key) + " " + v.dump() +
                                        " is above the limit of " + std::to_string(limit));
    }
    return static_cast<int32_t>(v.get<int64_t>());
  }

  StatusOr<Pattern> CompileType(const Json& s, const std::string& path, const std::string& t,
                                int32_t depth) {
    if (t == "null") return Literal("null");
    if (t == "boolean") return Alternate({Literal("true"), Literal("false")});
    if (t == "number") return JsonNumber();
    if (t == "integer") return JsonInteger();
    if (t == "string") return CompileString(s, path);
    if (t == "array") return CompileArray(s, path, depth);
    return CompileObject(s, path, depth);
  }

  StatusOr<Pattern> CompileString(const Json& s, const std::string& path) {
    StatusOr<int32_t> min = ReadCount(s, path, "minLength", kMaxJsonStringLength, 0);
    if (!min.ok()) return min.status();
    StatusOr<int32_t> max = ReadCount(s, path, "maxLength", kMaxJsonStringLength, -1);
    if (!max.ok()) return max.status();
    if (*max >= 0 && *min > *max) return Fail(path, "minLength is above maxLength");
    if (!s.contains("pattern")) return JsonString(*min, *max);
    if (s.contains("minLength") || s.contains("maxLength")) {
      return Fail(path, "keyword 'pattern' together with minLength/maxLength is not supported");
    }
    if (!s["pattern"].is_string()) return Fail(path + "/pattern", "must be a string");
    StatusOr<Pattern> value = ParseRegex(s["pattern"].get<std::string>());
    if (!value.ok()) return Fail(path + "/pattern", value.status().message());
    return JsonStringMatching(*value);
  }

  StatusOr<Pattern> CompileArray(const Json& s, const std::string& path, int32_t depth) {
    StatusOr<int32_t> min = ReadCount(s, path, "minItems", kMaxJsonItems, 0);
    if (!min.ok()) return min.status();
    StatusOr<int32_t> max = ReadCount(s, path, "maxItems", kMaxJsonItems, -1);
    if (!max.ok()) return max.status();
    if (*max >= 0 && *min > *max) return Fail(path, "minItems is above maxItems");
    Pattern item;
    if (!s.contains("items") || s["items"] == Json(true)) {
      item = AnyJsonValue(options_.any_json_depth, options_);
    } else if (s["items"] == Json(false)) {
      if (*min > 0) return Fail(path, "items is false but minItems is above 0");
      *max = 0;
    } else {
      StatusOr<Pattern> p = Compile(s["items"], path + "/items", depth + 1);
      if (!p.ok()) return p;
      item = std::move(*p);
    }
    if (*max == 0) return Concat({Literal("["), Ws(), Literal("]")});
    Pattern more = Repeat(Concat({Ws(), Literal(","), Ws(), item}), std::max(*min - 1, 0),
                          *max < 0 ? -1 : *max - 1);
    Pattern body = Concat({item, more, Ws()});
    return Concat({Literal("["), Ws(), *min == 0 ? Optional(body) : body, Literal("]")});
  }

  StatusOr<Pattern> CompileObject(const Json& s, const std::string& path, int32_t depth) {
    const Json empty = Json::object();
    const Json& props = s.contains("properties") ? s["properties"] : empty;
    if (!props.is_object()) return Fail(path + "/properties", "must be an object");
    std::set<std::string> required;
    if (s.contains("required")) {
      if (!s["required"].is_array()) return Fail(path + "/required", "must be an array");
      for (const Json& r : s["required"]) {
        if (!r.is_string()) return Fail(path + "/required", "must hold strings");
        if (!props.contains(r.get<std::string>())) {
          return Fail(path + "/required", "required property '" + r.get<std::string>() +
                                              "' is not in properties");
        }
        required.insert(r.get<std::string>());
      }
    }
    const Json* additional = s.contains("additionalProperties") ? &s["additionalProperties"]
                                                                : nullptr;
    if (additional && !additional->is_boolean() && !additional->is_object()) {
      return Fail(path + "/additionalProperties", "must be a boolean or a schema");
    }
    const Pattern colon = Concat({Ws(), Literal(":"), Ws()});
    if (props.empty()) {
      if (additional && *additional == Json(false)) {
        return Concat({Literal("{"), Ws(), Literal("}")});
      }
      if (!additional || additional->is_boolean()) return AnyJsonObject(options_);
      StatusOr<Pattern> value = Compile(*additional, path + "/additionalProperties", depth + 1);
      if (!value.ok()) return value;
      Pattern member = Concat({JsonString(), colon, *value});
      Pattern members = Concat({member, Repeat(Concat({Ws(), Literal(","), Ws(), member}), 0, -1),
                                Ws()});
      return Concat({Literal("{"), Ws(), Optional(members), Literal("}")});
    }
    std::vector<Pattern> items;
    std::vector<bool> flags;
    for (const auto& [key, schema] : props.items()) {
      const std::string sub = path + "/properties/" + PointerEscape(key);
      const bool is_required = required.contains(key);
      if (schema == Json(false)) {
        if (is_required) return Fail(sub, "the schema is false but the property is required");
        continue;
      }
      StatusOr<Pattern> value = Compile(schema, sub, depth + 1);
      if (!value.ok()) return value;
      items.push_back(Concat({Ws(), JsonValueLiteral(Json(key)), colon, *value}));
      flags.push_back(is_required);
      if (SaturatedSize(items) > kMaxSchemaPatternSize) {
        return Fail(path, "the schema needs more than " + std::to_string(kMaxSchemaPatternSize) +
                              " automaton states (the limit)");
      }
    }
    return Concat({Literal("{"), Subsequence(std::move(items), std::move(flags),
                                             Concat({Ws(), Literal(",")})),
                   Ws(), Literal("}")});
  }

  static int64_t SaturatedSize(const std::vector<Pattern>& items) {
    int64_t n = 0;
    for (const Pattern& p : items) n = std::min(kSizeSaturation, n + p->size);
    return n;
  }

  const Json& root_;
  const JsonSchemaOptions options_;
  const Pattern ws_;
  std::vector<std::string> ref_stack_;
};

}  // namespace

Pattern JsonWhitespace(const JsonSchemaOptions& options) {
  if (options.max_whitespace <= 0) return Empty();
  return Concat({Optional(Literal("\n")), Repeat(Chars(" \t"), 0, options.max_whitespace)});
}

Pattern JsonString(int32_t min_length, int32_t max_length) {
  return Concat({Literal("\""), Repeat(StringChar(), min_length, max_length), Literal("\"")});
}

Pattern JsonStringMatching(const Pattern& value) {
  return Concat({Literal("\""), EscapeForJson(value), Literal("\"")});
}

// Digit counts are bounded so that a model cannot loop on digits and every output parses to
// a finite double: at most 19 integer digits, 19 fraction digits and 2 exponent digits.
Pattern JsonInteger() {
  static const Pattern p =
      Concat({Optional(Literal("-")),
              Alternate({Literal("0"), Concat({ByteRange('1', '9'),
                                               Repeat(ByteRange('0', '9'), 0, kMaxJsonDigits - 1)})})});
  return p;
}

Pattern JsonNumber() {
  static const Pattern p = [] {
    Pattern fraction = Optional(Concat({Literal("."), Repeat(ByteRange('0', '9'), 1, kMaxJsonDigits)}));
    Pattern exponent = Optional(
        Concat({Chars("eE"), Optional(Chars("+-")), Repeat(ByteRange('0', '9'), 1, 2)}));
    return Concat({JsonInteger(), fraction, exponent});
  }();
  return p;
}

Pattern AnyJsonValue(int32_t depth, const JsonSchemaOptions& options) {
  const Pattern ws = JsonWhitespace(options);
  std::vector<Pattern> options_list = {JsonString(), JsonNumber(), Literal("true"),
                                       Literal("false"), Literal("null")};
  if (depth <= 0) {
    options_list.push_back(Concat({Literal("{"), ws, Literal("}")}));
    options_list.push_back(Concat({Literal("["), ws, Literal("]")}));
    return Alternate(std::move(options_list));
  }
  const Pattern inner = AnyJsonValue(depth - 1, options);
  const Pattern comma = Concat({ws, Literal(","), ws});
  Pattern member = Concat({JsonString(), ws, Literal(":"), ws, inner});
  Pattern members = Concat({member, Repeat(Concat({comma, member}), 0, -1), ws});
  Pattern elements = Concat({inner, Repeat(Concat({comma, inner}), 0, -1), ws});
  options_list.push_back(Concat({Literal("{"), ws, Optional(members), Literal("}")}));
  options_list.push_back(Concat({Literal("["), ws, Optional(elements), Literal("]")}));
  return Alternate(std::move(options_list));
}

Pattern AnyJsonObject(const JsonSchemaOptions& options) {
  const Pattern ws = JsonWhitespace(options);
  if (options.any_json_depth <= 0) return Concat({Literal("{"), ws, Literal("}")});
  Pattern member = Concat({JsonString(), ws, Literal(":"), ws,
                           AnyJsonValue(options.any_json_depth - 1, options)});
  Pattern members = Concat({member, Repeat(Concat({ws, Literal(","), ws, member}), 0, -1), ws});
  return Concat({Literal("{"), ws, Optional(members), Literal("}")});
}

Pattern JsonValueLiteral(const nlohmann::ordered_json& value) {
  return Literal(value.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace));
}

StatusOr<Pattern> JsonSchemaPattern(const nlohmann::ordered_json& schema,
                                    const JsonSchemaOptions& options) {
  if (CountValues(schema, kMaxSchemaValues) > kMaxSchemaValues) {
    return InvalidArgumentError("#: the schema has more than " +
                                std::to_string(kMaxSchemaValues) + " values (the limit)");
  }
  SchemaCompiler compiler(schema, options);
  return compiler.Compile(schema, "#", 0);
}

}  // namespace aicloud::engine::structured
