#include "gateway/request.h"

#include <gtest/gtest.h>

#include "gateway/access.h"
#include "gateway/replicas.h"

namespace aicloud::gateway {
namespace {

using nlohmann::json;

// The document-free reader agrees with UsageOf on every shape, malformed ones included.
TEST(Usage, TextReaderAgreesWithTheDocumentReader) {
  for (const char* body : {
           R"({"id":"x","choices":[{"message":{"content":"usage: 5"}}],"usage":{"prompt_tokens":12,"completion_tokens":30,"total_tokens":42}})",
           R"({"usage":{"prompt_tokens":3}})",
           R"({"usage":{"prompt_tokens":-5,"completion_tokens":"7"}})",
           R"({"usage":{"prompt_tokens":1.5,"completion_tokens":null}})",
           R"({"usage":{"prompt_tokens":{"a":1},"completion_tokens":[2]}})",
           R"({"usage":{"prompt_tokens":4,"prompt_tokens":{}}})",
           R"({"usage":{"prompt_tokens_details":{"prompt_tokens":99},"prompt_tokens":8,"completion_tokens":9}})",
           R"({"usage":{"prompt_tokens":18446744073709551615,"completion_tokens":9223372036854775807}})",
           R"({"usage":{"prompt_tokens":1},"usage":{"completion_tokens":2}})",
           R"({"usage":{"prompt_tokens":1},"usage":null})",
           R"({"usage":{"prompt_tokens":1},"usage":[1,2]})",
           R"({"usage":null})",
           R"({"usage":7})",
           R"({"x":{"usage":{"prompt_tokens":5}}})",
           R"([{"usage":{"prompt_tokens":5}}])",
           R"({"usage":{"prompt_tokens":5}} trailing)",
           R"({"usage":{"prompt_tokens":5})",
           "",
           "not json",
           "{}",
           // Numbers simdjson does not take but documents read as floats (or refuse: 1e400).
           R"({"usage":{"prompt_tokens":6,"completion_tokens":2},"seed":123456789012345678901234567890})",
           R"({"usage":{"prompt_tokens":123456789012345678901234567890,"completion_tokens":2}})",
           R"({"usage":{"prompt_tokens":6},"x":1e400})",
           R"({"usage":{"prompt_tokens":6},"x":"\ud800"})",
       }) {
    const json doc = json::parse(body, nullptr, false);
    std::optional<TokenUsage> want = UsageOf(doc), got = UsageOfText(body);
    ASSERT_EQ(want.has_value(), got.has_value()) << body;
    if (want) {
      EXPECT_EQ(want->prompt_tokens, got->prompt_tokens) << body;
      EXPECT_EQ(want->completion_tokens, got->completion_tokens) << body;
    }
  }
}

TEST(RequestInfo, ChatPromptAndEstimateIsAnUpperBound) {
  json body = {{"model", "m"},
               {"messages", {{{"role", "system"}, {"content", "be brief"}},
                             {{"role", "user"}, {"content", {{{"type", "text"}, {"text", "hello"}}}}}}},
               {"max_tokens", 20},
               {"stream", true},
               {"stream_options", {{"include_usage", true}}}};
  StatusOr<RequestInfo> r = ParseRequestInfo(body.dump(), Endpoint::kChat);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->prompt_text, "system\nbe brief\nuser\nhello\n");
  EXPECT_TRUE(r->stream);
  EXPECT_TRUE(r->include_usage);
  EXPECT_EQ(r->max_tokens, 20);
  EXPECT_EQ(r->PromptTokensUpperBound(), 27 + 2 * 8 + 16);  // bytes + per message + per request
}

// What a chat template renders besides the messages' text counts too, and every prompt of a
// batched completion gets its own choices: the reservation stays an upper bound.
TEST(RequestInfo, ToolsImagesAndBatchedPromptsAreInTheBound) {
  const json tools = json::array({{{"type", "function"}, {"function", {{"name", "f"}, {"parameters", json::object()}}}}});
  json chat = {{"model", "m"},
               {"messages", {{{"role", "user"}, {"content", {{{"type", "image_url"}, {"image_url", {{"url", "x"}}}}}}},
                             {{"role", "assistant"}, {"content", nullptr}, {"tool_calls", json::array({{{"id", "c"}}})}}}},
               {"tools", tools},
               {"response_format", {{"type", "json_object"}}}};
  StatusOr<RequestInfo> r = ParseRequestInfo(chat.dump(), Endpoint::kChat);
  ASSERT_TRUE(r.ok()) << r.status();
  const int64_t extra = kImageTokensBound + static_cast<int64_t>(json::array({{{"id", "c"}}}).dump().size()) +
                        static_cast<int64_t>(tools.dump().size()) +
                        static_cast<int64_t>(json{{"type", "json_object"}}.dump().size());
  EXPECT_EQ(r->extra_prompt_tokens, extra);
  EXPECT_EQ(r->PromptTokensUpperBound(), static_cast<int64_t>(r->prompt_text.size()) + extra + 2 * 8 + 16);
  StatusOr<RequestInfo> batch =
      ParseRequestInfo(json{{"model", "m"}, {"prompt", {"a", "b", "c"}}, {"n", 2}}.dump(), Endpoint::kCompletions);
  ASSERT_TRUE(batch.ok());
  EXPECT_EQ(batch->prompts, 3);
  EXPECT_EQ(batch->CompletionTokensBound(100), 600);
  EXPECT_EQ(UsageOf(json{{"usage", {{"prompt_tokens", -5}, {"completion_tokens", "7"}}}})->prompt_tokens, 0);
  EXPECT_EQ(UsageOf(json{{"usage", {{"prompt_tokens", -5}, {"completion_tokens", "7"}}}})->completion_tokens, 0);
}

TEST(RequestInfo, CompletionTokenIdsCountExactly) {
  StatusOr<RequestInfo> r = ParseRequestInfo(json{{"model", "m"}, {"prompt", {1, 2, 3}}}.dump(), Endpoint::kCompletions);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->prompt_token_ids, 3);
  EXPECT_FALSE(r->max_tokens.has_value());
}

// The text is read as a document reads it: the last of a repeated member counts, numbers other
// parsers take as floats are taken, and what is not JSON says so.
TEST(RequestInfo, ReadsTheTextAsADocumentWould) {
  StatusOr<RequestInfo> r = ParseRequestInfo(
      R"({"model":"a","max_tokens":5,"messages":[{"role":"user","content":"hi"}],"model":"b","max_tokens":7,"seed":123456789012345678901234567890})",
      Endpoint::kChat);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->model, "b");
  EXPECT_EQ(r->max_tokens, 7);
  EXPECT_EQ(r->prompt_text, "user\nhi\n");
  StatusOr<RequestInfo> bad = ParseRequestInfo(R"({"model":"m",)", Endpoint::kChat);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message().rfind("body: not valid JSON (", 0), 0u) << bad.status().message();
  StatusOr<RequestInfo> arr = ParseRequestInfo("[1]", Endpoint::kChat);
  ASSERT_FALSE(arr.ok());
  EXPECT_EQ(arr.status().message(), "body: expected a JSON object");
  EXPECT_FALSE(ParseRequestInfo(R"({"model":"m","x":1e400})", Endpoint::kCompletions).ok());  // no parser takes it
  // A byte order mark is skipped, as document parsers do.
  StatusOr<RequestInfo> bom = ParseRequestInfo("\xEF\xBB\xBF{\"model\":\"m\",\"prompt\":\"x\"}", Endpoint::kCompletions);
  ASSERT_TRUE(bom.ok()) << bom.status();
  EXPECT_EQ(bom->model, "m");
  // Nesting beyond 1024 levels is refused, also where a number sends the text through the
  // document reader (whose writer recurses per level: 100,000 levels would overflow the stack).
  const std::string deep = std::string(100'000, '[') + std::string(100'000, ']');
  for (const std::string& body : {R"({"model":"m","prompt":"x","d":)" + deep + "}",
                                  R"({"model":"m","prompt":"x","seed":123456789012345678901234567890,"d":)" + deep + "}"}) {
    EXPECT_FALSE(ParseRequestInfo(body, Endpoint::kCompletions).ok());
    EXPECT_FALSE(UsageOfText(R"({"usage":{"prompt_tokens":1},"seed":123456789012345678901234567890,"d":)" + deep + "}"));
    EXPECT_FALSE(RewriteBody(body, {.max_tokens = 5}).ok());
  }
  // A large document (beyond the per-thread parser's size) reads the same.
  std::string big = R"({"model":"m","prompt":")" + std::string(3 << 20, 'x') + R"("})";
  StatusOr<RequestInfo> large = ParseRequestInfo(big, Endpoint::kCompletions);
  ASSERT_TRUE(large.ok()) << large.status();
  EXPECT_EQ(large->prompt_text.size(), size_t{3} << 20);
}

// The rewritten text reads as the same document an nlohmann rewrite gives (members' order aside),
// for every combination of edits, with repeated members, escapes, a stream_options with other
// members, one that is null, and numbers simdjson refuses.
TEST(RequestInfo, RewrittenBodyIsTheDocumentWithTheEdits) {
  const char* bodies[] = {
      R"({"model":"alias","messages":[{"role":"user","content":"h\u00e9 \"q\" \\ \n é"}],"temperature":0.25,"stop":["\u0000"]})",
      R"({"model":"a","model":"b","max_tokens":3,"max_tokens":null,"stream":true,"stream_options":{"continuous_usage_stats":true,"include_usage":false}})",
      R"({"stream_options":null,"n":2,"logit_bias":{"50256":-100},"x":[1,2.5e-7,{"y":[]}]})",
      R"({"stream_options":{"a":1},"stream_options":{"include_usage":false,"b":[true]},"messages":[]})",
      R"({"seed":123456789012345678901234567890,"model":"m"})",
      R"({})",
  };
  for (const char* body : bodies) {
    for (int mask = 1; mask < 8; ++mask) {
      BodyEdits e;
      if (mask & 1) e.model = "base \"model\"";
      e.include_usage = (mask & 2) != 0;
      if (mask & 4) e.max_tokens = 1024;
      StatusOr<std::string> got = RewriteBody(body, e);
      ASSERT_TRUE(got.ok()) << body << ": " << got.status();
      json want = json::parse(body);
      if (e.model) want["model"] = *e.model;
      if (e.include_usage) {
        if (!want["stream_options"].is_object()) want["stream_options"] = json::object();
        want["stream_options"]["include_usage"] = true;
      }
      if (e.max_tokens) want["max_tokens"] = *e.max_tokens;
      const json doc = json::parse(*got, nullptr, false);
      ASSERT_FALSE(doc.is_discarded()) << *got;
      EXPECT_EQ(doc, want) << body << " mask " << mask << " -> " << *got;
      // An edited member appears once (a document would hide a duplicate; an engine might not).
      auto count = [&](std::string_view key) {
        int n = 0;
        for (size_t at = got->find(key); at != std::string::npos; at = got->find(key, at + 1)) ++n;
        return n;
      };
      if (e.model) {
        EXPECT_EQ(count(R"("model":)"), 1) << *got;
      }
      if (e.include_usage) {
        EXPECT_EQ(count(R"("include_usage":)"), 1) << *got;
      }
      if (e.max_tokens) {
        EXPECT_EQ(count(R"("max_tokens":)"), 1) << *got;
      }
    }
  }
  // Members keep their order; the edited ones come last, stream_options keeping its others.
  EXPECT_EQ(*RewriteBody(R"({"stream_options":{"x":1,"include_usage":false},"model":"a","stream":true, "n" : 2})",
                         {.model = "b", .include_usage = true}),
            R"({"stream":true,"n":2,"model":"b","stream_options":{"x":1,"include_usage":true}})");
  EXPECT_FALSE(RewriteBody("[1]", {.max_tokens = 5}).ok());
  EXPECT_FALSE(RewriteBody("{", {.max_tokens = 5}).ok());
  StatusOr<RequestInfo> r = ParseRequestInfo(R"({"model":"m","prompt":"x","stream_options":"yes"})", Endpoint::kCompletions);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), "stream_options: must be an object");
}

// The gateway reads a body and then rewrites it; the rewrite reuses the document the read left in
// the thread's parser only when it is of the same bytes, and writes what a fresh parse would.
TEST(RequestInfo, ARewriteAfterAReadWritesWhatAFreshParseWould) {
  const BodyEdits edits{.model = "base", .include_usage = true};
  const std::string a = R"({"model":"alias","messages":[{"role":"user","content":"aaaa"}],"stream":true})";
  std::string b = a;
  b.replace(b.find("aaaa"), 4, "bbbb");  // same size, other bytes
  auto rewrite = [&](const std::string& text) {
    StatusOr<std::string> out = RewriteBody(text, edits);
    EXPECT_TRUE(out.ok()) << text << ": " << out.status();
    return out.ok() ? *out : std::string();
  };
  auto reuses = [] { return request_internal::DocumentReuses(); };
  const std::string fresh_a = rewrite(a);
  ASSERT_TRUE(UsageOfText(R"({"usage":{"prompt_tokens":1}})").has_value());  // the parser now holds another text
  const std::string fresh_b = rewrite(b);
  ASSERT_NE(fresh_a, fresh_b);

  int64_t before = reuses();
  ASSERT_TRUE(ParseRequestInfo(a, Endpoint::kChat).ok());
  EXPECT_EQ(rewrite(a), fresh_a);  // the read's document
  EXPECT_EQ(reuses(), before + 1);
  ASSERT_TRUE(ParseRequestInfo(a, Endpoint::kChat).ok());
  EXPECT_EQ(rewrite(b), fresh_b);  // not a's document: the bytes differ
  EXPECT_EQ(reuses(), before + 1);
  ASSERT_TRUE(ParseRequestInfo(a, Endpoint::kChat).ok());
  EXPECT_EQ(rewrite("\xEF\xBB\xBF" + a), fresh_a);  // a byte order mark is read past either way
  EXPECT_EQ(reuses(), before + 2);
  ASSERT_FALSE(ParseRequestInfo("{\"model\":", Endpoint::kChat).ok());
  EXPECT_FALSE(RewriteBody("{\"model\":", edits).ok());  // a failed read leaves no document
  EXPECT_EQ(reuses(), before + 2);
  ASSERT_TRUE(ParseRequestInfo(a, Endpoint::kChat).ok());
  ASSERT_TRUE(UsageOfText(R"({"usage":{"prompt_tokens":1}})").has_value());
  EXPECT_EQ(rewrite(a), fresh_a);  // parsed again after another text
  EXPECT_EQ(reuses(), before + 2);
  // A number simdjson refuses: the read and the rewrite both go through a document.
  const std::string big_number = R"({"model":"alias","messages":[],"seed":123456789012345678901234567890})";
  ASSERT_TRUE(ParseRequestInfo(big_number, Endpoint::kChat).ok());
  const std::string renormalized = rewrite(big_number);
  EXPECT_EQ(json::parse(renormalized)["model"], "base") << renormalized;
  EXPECT_EQ(reuses(), before + 2);
  const std::string big = json{{"model", "alias"}, {"messages", {{{"role", "user"}, {"content", std::string(300 << 10, 'x')}}}}}
                              .dump();  // over the size the thread's parser keeps
  ASSERT_TRUE(ParseRequestInfo(a, Endpoint::kChat).ok());
  ASSERT_TRUE(ParseRequestInfo(big, Endpoint::kChat).ok());
  EXPECT_EQ(json::parse(rewrite(big))["model"], "base");
  EXPECT_EQ(reuses(), before + 2);
  EXPECT_EQ(rewrite(a), fresh_a);
}

TEST(RequestInfo, BadFieldsAreNamed) {
  struct Case {
    json body;
    Endpoint ep;
    const char* want;
  } cases[] = {
      {json::object(), Endpoint::kChat, "model: required"},
      {{{"model", 3}}, Endpoint::kChat, "model: required"},
      {{{"model", "m"}}, Endpoint::kChat, "messages: required"},
      {{{"model", "m"}, {"messages", json::array()}, {"stream", "yes"}}, Endpoint::kChat, "stream: must be a boolean"},
      {{{"model", "m"}, {"prompt", "x"}, {"max_tokens", -1}}, Endpoint::kCompletions, "max_tokens: must be"},
      // Bounded, so the worst case prompt + max_tokens * n of a reservation cannot overflow.
      {{{"model", "m"}, {"prompt", "x"}, {"max_tokens", int64_t{1} << 62}}, Endpoint::kCompletions,
       "max_tokens: must be an integer from 0 to 100000000"},
      {{{"model", "m"}, {"prompt", "x"}, {"n", int64_t{1} << 40}}, Endpoint::kCompletions, "n: must be an integer from 1 to 128"},
      {{{"model", "m"}, {"prompt", "x"}, {"n", 0}}, Endpoint::kCompletions, "n: must be"},
      {{{"model", "m"}, {"prompt", "x"}, {"stream_options", {{"include_usage", "yes"}}}}, Endpoint::kCompletions,
       "stream_options.include_usage: must be a boolean"},
  };
  for (const Case& c : cases) {
    StatusOr<RequestInfo> r = ParseRequestInfo(c.body.dump(), c.ep);
    ASSERT_FALSE(r.ok()) << c.body.dump();
    EXPECT_NE(r.status().message().find(c.want), std::string::npos) << r.status().message();
  }
}

TEST(PrefixHashes, ChainedOverFullBlocks) {
  std::string a(1000, 'a'), b = a;
  b[600] = 'b';
  std::vector<uint64_t> ha = PrefixHashes(a, 256, 256), hb = PrefixHashes(b, 256, 256);
  ASSERT_EQ(ha.size(), 3u);  // 1000 / 256: the partial block is not hashed
  EXPECT_EQ(ha[0], hb[0]);
  EXPECT_EQ(ha[1], hb[1]);
  EXPECT_NE(ha[2], hb[2]);
  EXPECT_NE(ha[0], ha[1]);  // same bytes, different position: chained
  EXPECT_EQ(PrefixHashes(a, 256, 2).size(), 2u);
}

TEST(EngineMetrics, ParsesVllmGauges) {
  EngineMetrics m = ParseEngineMetrics(
      "# HELP vllm:num_requests_running x\n"
      "vllm:num_requests_running{model_name=\"a\"} 3\n"
      "vllm:num_requests_waiting{model_name=\"a\"} 2\n"
      "vllm:num_requests_waiting{model_name=\"b\"} 1\n"
      "vllm:kv_cache_usage_perc{model_name=\"a\"} 0.25\n"
      "vllm:num_requests_running_other 99\n");
  EXPECT_TRUE(m.any);
  EXPECT_EQ(m.running, 3);
  EXPECT_EQ(m.waiting, 3);
  EXPECT_DOUBLE_EQ(m.kv_usage, 0.25);
  EXPECT_FALSE(ParseEngineMetrics("up 1\n").any);
}

TEST(Access, BearerAndRbac) {
  EXPECT_EQ(BearerToken("Bearer abc"), "abc");
  EXPECT_EQ(BearerToken("bearer  abc "), "abc");
  EXPECT_EQ(BearerToken("Basic abc"), "");
  Route r{.deployment = "d", .tenant = "a", .model = "m", .base_model = "m", .adapters = {"lora1", "lora2"}};
  struct Case {
    Caller who;
    std::string adapter;
    bool want;
  } cases[] = {
      {{.tenant = "a"}, "", true},
      {{.tenant = "a"}, "lora1", true},
      {{.tenant = "b"}, "", false},
      {{.tenant = "b"}, "lora1", false},
      {{.tenant = "b", .models = {"m"}}, "lora2", true},    // adapters inherit the base's grant
      {{.tenant = "b", .models = {"lora1"}}, "lora1", true},
      {{.tenant = "b", .models = {"lora1"}}, "lora2", false},
      {{.tenant = "b", .models = {"lora1"}}, "", false},    // an adapter grant is not the base's
      {{.tenant = "b", .models = {"*"}}, "", true},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(MayUse(c.who, r, c.adapter), c.want) << c.who.tenant << " " << c.adapter;
  }
}

}  // namespace
}  // namespace aicloud::gateway
