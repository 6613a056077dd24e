#include "engine/structured/json_schema.h"

#include <gtest/gtest.h>

#include <iostream>
#include <string>
#include <vector>

#include "engine/structured/grammar.h"

namespace aicloud::engine::structured {
namespace {

using Json = nlohmann::ordered_json;

std::shared_ptr<ByteAutomaton> CompileSchema(const std::string& schema_text,
                                             const JsonSchemaOptions& options = {}) {
  StatusOr<Pattern> p = JsonSchemaPattern(Json::parse(schema_text), options);
  EXPECT_TRUE(p.ok()) << schema_text << ": " << p.status();
  if (!p.ok()) return nullptr;
  StatusOr<std::shared_ptr<ByteAutomaton>> a = ByteAutomaton::Compile(*p);
  EXPECT_TRUE(a.ok()) << schema_text << ": " << a.status();
  return a.ok() ? *a : nullptr;
}

struct SchemaCase {
  std::string schema;
  std::vector<std::string> valid;
  std::vector<std::string> invalid;
};

TEST(JsonSchemaTest, ValidInstancesAcceptedInvalidRejected) {
  const std::vector<SchemaCase> cases = {
      {R"({"type":"string"})",
       {R"("")", R"("abc")", R"("é😀")", R"("a\"b\\c\/d\b\f\n\r\t")", R"("\u00e9\uD83D\uDE00")"},
       {R"(abc)", R"("a)", "\"a\nb\"", R"("\x")", R"("\ud800")", R"("\ud800x")", "\"\xff\"",
        "\"\xc3\"", R"("\u12")"}},
      {R"({"type":"integer"})", {"0", "-7", "1234567890"}, {"01", "-", "1.5", "1e3", "+1", "-0.0"}},
      {R"({"type":"number"})", {"0", "-0.5", "1e10", "2.5E-3", "10"}, {".5", "1.", "01", "1e", "--1"}},
      {R"({"type":"boolean"})", {"true", "false"}, {"True", "1", "null"}},
      {R"({"type":"null"})", {"null"}, {"nil", ""}},
      {R"({"type":["string","null"]})", {"null", R"("x")"}, {"1", "true"}},
      {R"({"type":"string","nullable":true})", {"null", R"("x")"}, {"1"}},
      {R"({"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"string"}},
           "required":["a","b"],"additionalProperties":false})",
       {R"({"a":1,"b":"x"})", R"({ "a": 1, "b": "x" })", "{\n  \"a\": 1,\n  \"b\": \"x\"\n}",
        "{\"a\" :1 ,\"b\":\"x\"}"},
       {R"({"b":"x","a":1})", R"({"a":1})", R"({"a":1,"b":"x",})", R"({"a":1,,"b":"x"})",
        R"({"a":"1","b":"x"})", R"({"a":1,"b":"x","c":2})", "{\"a\":1,\n\n\"b\":\"x\"}"}},
      // Optional properties: every subset, in order, commas right.
      {R"({"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"integer"},
           "c":{"type":"integer"}},"required":["b"]})",
       {R"({"b":2})", R"({"a":1,"b":2})", R"({"b":2,"c":3})", R"({"a":1,"b":2,"c":3})"},
       {R"({})", R"({"a":1})", R"({"a":1,"c":3})", R"({,"b":2})", R"({"b":2,})", R"({"a":1"b":2})",
        R"({"c":3,"b":2})"}},
      {R"({"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"integer"}}})",
       {R"({})", R"({ })", R"({"a":1})", R"({"b":2})", R"({"a":1,"b":2})"},
       {R"({,})", R"({"a":1,})", R"({"b":2,"a":1})"}},
      // Nested objects and arrays with bounds.
      {R"({"type":"object","properties":{"tags":{"type":"array","items":{"type":"string"},
           "minItems":1,"maxItems":3},"meta":{"type":"object","properties":{"n":{"type":"number"}},
           "required":["n"]}},"required":["tags","meta"]})",
       {R"({"tags":["a"],"meta":{"n":1}})", R"({"tags":["a","b","c"],"meta":{"n":-2.5}})",
        R"({"tags": [ "a" , "b" ], "meta": {"n": 0}})"},
       {R"({"tags":[],"meta":{"n":1}})", R"({"tags":["a","b","c","d"],"meta":{"n":1}})",
        R"({"tags":["a"],"meta":{}})", R"({"tags":[1],"meta":{"n":1}})"}},
      {R"({"type":"array","maxItems":0})", {"[]", "[ ]"}, {"[1]"}},
      {R"({"type":"array","items":{"type":"integer"}})", {"[]", "[1,2,3]", "[ 1 ]"}, {"[1,]", "[,1]", "[\"a\"]"}},
      {R"({"enum":["red","green",1,null,{"k":[1,2]}]})",
       {R"("red")", R"("green")", "1", "null", R"({"k":[1,2]})"},
       {R"("blue")", "2", R"({"k":[1, 2]})"}},
      {R"({"type":"string","enum":["a",1]})", {R"("a")"}, {"1"}},
      {R"({"const":"fixed"})", {R"("fixed")"}, {R"("other")"}},
      {R"({"anyOf":[{"type":"integer"},{"type":"object","properties":{"x":{"type":"boolean"}},
           "required":["x"]}]})",
       {"5", R"({"x":true})"}, {R"({"x":1})", R"("5")"}},
      {R"({"allOf":[{"type":"integer"}],"description":"one"})", {"3"}, {"3.5"}},
      {R"({"$defs":{"point":{"type":"object","properties":{"x":{"type":"integer"},
           "y":{"type":"integer"}},"required":["x","y"]}},
           "type":"object","properties":{"from":{"$ref":"#/$defs/point"},"to":{"$ref":"#/$defs/point"}},
           "required":["from","to"]})",
       {R"({"from":{"x":1,"y":2},"to":{"x":3,"y":4}})"}, {R"({"from":{"x":1},"to":{"x":3,"y":4}})"}},
      {R"({"definitions":{"s":{"type":"string"}},"$ref":"#/definitions/s"})", {R"("x")"}, {"1"}},
      {R"({"type":"string","pattern":"^[a-z]{2}-\\d+$"})", {R"("ab-12")"}, {R"("ab-")", R"("AB-1")", "ab-12"}},
      // The value's quote, backslash and newline are written escaped inside the JSON string.
      {R"({"type":"string","pattern":"a[\"\\\\\\n]b"})",
       {R"("a\"b")", R"("a\\b")", R"("a\nb")"}, {"\"a\"b\"", "\"a\\b\"", "\"a\nb\""}},
      {R"({"type":"string","minLength":2,"maxLength":3})",
       {R"("ab")", R"("abc")", R"("é😀")", R"("a\nb")"}, {R"("a")", R"("abcd")", R"("")"}},
      // Free-form objects.
      {R"({"type":"object"})", {R"({})", R"({"a":[1,{"b":null}],"c":"d"})"}, {R"([])", R"({"a"})", R"({"a":})"}},
      {R"({"type":"object","additionalProperties":{"type":"integer"}})",
       {R"({})", R"({"x":1,"y":2})"}, {R"({"x":"1"})"}},
      {R"({"type":"object","additionalProperties":false})", {R"({})"}, {R"({"a":1})"}},
      {R"({})", {"1", R"("s")", "null", "[]", R"({"a":1})"}, {"", "nul", "[1,]"}},
      {R"({"title":"t","description":"d","$schema":"x","type":"integer","default":1,"examples":[1],
           "strict":true,"$comment":"c","nullable":false})", {"1"}, {"null"}},
  };
  for (const SchemaCase& c : cases) {
    auto a = CompileSchema(c.schema);
    ASSERT_NE(a, nullptr) << c.schema;
    for (const std::string& s : c.valid) EXPECT_TRUE(a->Matches(s)) << c.schema << "\n accepts " << s;
    for (const std::string& s : c.invalid) EXPECT_FALSE(a->Matches(s)) << c.schema << "\n rejects " << s;
  }
}

TEST(JsonSchemaTest, WhitespaceIsBoundedAndNeverRequired) {
  JsonSchemaOptions options;
  options.max_whitespace = 4;
  auto a = CompileSchema(R"({"type":"array","items":{"type":"integer"}})", options);
  ASSERT_NE(a, nullptr);
  EXPECT_TRUE(a->Matches("[1,2]"));
  EXPECT_TRUE(a->Matches("[\n    1,\n    2\n]"));
  EXPECT_FALSE(a->Matches("[     1]"));     // 5 spaces
  EXPECT_FALSE(a->Matches("[\n\n1]"));      // two newlines
  // No loop on whitespace: a bounded number of bytes before something else must come.
  int32_t s = a->Walk(a->start(), "[");
  for (int i = 0; i < 5; ++i) s = a->Step(s, ' ');
  EXPECT_EQ(s, ByteAutomaton::kDead);

  options.max_whitespace = 0;
  a = CompileSchema(R"({"type":"object","properties":{"a":{"type":"integer"}}})", options);
  ASSERT_NE(a, nullptr);
  EXPECT_TRUE(a->Matches(R"({"a":1})"));
  EXPECT_FALSE(a->Matches(R"({"a": 1})"));
}

TEST(JsonSchemaTest, AnyJsonObjectIsDepthBounded) {
  JsonSchemaOptions options;
  options.any_json_depth = 2;
  StatusOr<std::shared_ptr<ByteAutomaton>> a = ByteAutomaton::Compile(AnyJsonObject(options));
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_TRUE((*a)->Matches(R"({"a":{"b":1},"c":[1,[]]})"));
  EXPECT_TRUE((*a)->Matches(R"({})"));
  EXPECT_FALSE((*a)->Matches(R"({"a":{"b":{"c":1}}})"));
  EXPECT_FALSE((*a)->Matches(R"([1])"));
  EXPECT_FALSE((*a)->Matches(R"("x")"));
}

TEST(JsonSchemaTest, DefaultFreeFormFitsTheLimits) {
  const Pattern p = AnyJsonObject();
  EXPECT_LE(p->size, kMaxSchemaPatternSize);
  StatusOr<std::shared_ptr<ByteAutomaton>> a = ByteAutomaton::Compile(p);
  ASSERT_TRUE(a.ok()) << a.status();
  std::cout << "AnyJsonObject: estimated " << p->size << ", NFA states " << (*a)->nfa_states()
            << "\n";
}

TEST(JsonSchemaTest, RefusalsNameKeywordAndPath) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"({"oneOf":[{"type":"string"}]})", "#: keyword 'oneOf' is not supported"},
      {R"({"type":"object","properties":{"id":{"type":"string","format":"uuid"}}})",
       "#/properties/id: keyword 'format' is not supported"},
      {R"({"type":"integer","minimum":0})", "#: keyword 'minimum' is not supported"},
      {R"({"type":"array","items":{"not":{}}})", "#/items: keyword 'not' is not supported"},
      {R"({"type":"array","uniqueItems":true})", "#: keyword 'uniqueItems' is not supported"},
      {R"({"type":"object","patternProperties":{}})", "#: keyword 'patternProperties' is not supported"},
      {R"({"if":{},"then":{}})", "#: keyword 'if' is not supported"},
      {R"({"type":"string","frobnicate":1})", "#: keyword 'frobnicate' is not supported"},
      {R"({"allOf":[{"type":"string"},{"maxLength":3}]})",
       "#: keyword 'allOf' with other than one schema is not supported"},
      {R"({"anyOf":[{"type":"string"}],"type":"string"})",
       "#: keyword 'type' alongside 'anyOf' is not supported"},
      {R"({"$defs":{"n":{"type":"object","properties":{"next":{"$ref":"#/$defs/n"}}}},"$ref":"#/$defs/n"})",
       "#/$defs/n/properties/next: recursive $ref '#/$defs/n' is not supported"},
      {R"({"type":"object","properties":{"self":{"$ref":"#"}}})",
       "#/properties/self: recursive $ref '#' is not supported"},
      {R"({"$ref":"http://example.com/s.json"})", "$ref 'http://example.com/s.json' is not supported"},
      {R"({"$ref":"#/$defs/missing"})", "#: $ref '#/$defs/missing' points at nothing"},
      {R"({"type":"strin"})", "#/type: unknown type \"strin\""},
      {R"({"type":"object","properties":{"a":{}},"required":["b"]})",
       "#/required: required property 'b' is not in properties"},
      {R"j({"type":"string","pattern":"(?=x)"})j",
       "#/pattern: lookahead (?= at offset 0 is not supported"},
      {R"({"type":"string","maxLength":5000})", "#/maxLength: maxLength 5000 is above the limit of 1000"},
      {R"({"type":"array","minItems":3,"maxItems":2})", "#: minItems is above maxItems"},
      {R"({"type":"string","enum":[1,2]})", "#: no enum value has the schema's type"},
      {R"({"enum":["a"],"minLength":1})", "#: keyword 'minLength' alongside 'enum' is not supported"},
      {"false", "#: the schema false matches nothing"},
      {"[1]", "#: a schema must be an object or a boolean"},
  };
  for (const auto& [schema, message] : cases) {
    StatusOr<Pattern> p = JsonSchemaPattern(Json::parse(schema));
    ASSERT_FALSE(p.ok()) << schema;
    EXPECT_EQ(p.status().code(), StatusCode::kInvalidArgument) << schema;
    EXPECT_NE(p.status().message().find(message), std::string::npos)
        << schema << ": got \"" << p.status().message() << "\", want \"" << message << "\"";
  }
}

TEST(JsonSchemaTest, OversizedSchemasFailFast) {
  // Exponential blow-up through $defs: each level uses the one below four times.
  Json s = {{"$defs", Json::object()}};
  s["$defs"]["l0"] = {{"type", "string"}, {"maxLength", 1000}};
  for (int i = 1; i <= 12; ++i) {
    const std::string below = "#/$defs/l" + std::to_string(i - 1);
    Json props = Json::object();
    for (const char* k : {"a", "b", "c", "d"}) props[k] = {{"$ref", below}};
    s["$defs"]["l" + std::to_string(i)] = {{"type", "object"}, {"properties", props}};
  }
  s["$ref"] = "#/$defs/l12";
  StatusOr<Pattern> p = JsonSchemaPattern(s);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(p.status().message().find("limit"), std::string::npos) << p.status();

  // Too many values.
  Json big = {{"enum", Json::array()}};
  for (int i = 0; i < 30000; ++i) big["enum"].push_back(i);
  p = JsonSchemaPattern(big);
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("more than 20000 values"), std::string::npos) << p.status();

  // Deeply nested subschemas.
  Json deep = {{"type", "integer"}};
  for (int i = 0; i < 100; ++i) deep = {{"type", "array"}, {"items", deep}};
  p = JsonSchemaPattern(deep);
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("deeper than 64"), std::string::npos) << p.status();
}

TEST(JsonSchemaTest, ValueLiteralIsCanonical) {
  StatusOr<std::shared_ptr<ByteAutomaton>> a = ByteAutomaton::Compile(
      JsonValueLiteral(Json::parse(R"({"b": [1, 2.5, "é\n"], "a": null})")));
  ASSERT_TRUE(a.ok());
  EXPECT_TRUE((*a)->Matches(R"({"b":[1,2.5,"é\n"],"a":null})"));
}

}  // namespace
}  // namespace aicloud::engine::structured
