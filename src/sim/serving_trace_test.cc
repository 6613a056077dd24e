#include "sim/serving_trace.h"

#include <gtest/gtest.h>

#include <string>

namespace aicloud::sim {
namespace {

StatusOr<ServingTrace> Azure(const std::string& rows) {
  StatusOr<CsvTable> t = CsvTable::Parse("TIMESTAMP,ContextTokens,GeneratedTokens\n" + rows,
                                         "AzureLLMInferenceTrace_conv.csv");
  if (!t.ok()) return t.status();
  return ParseAzureLlmTrace(*t);
}

TEST(ServingTraceTest, ParsesAzureRowsRelativeToTheFirst) {
  StatusOr<ServingTrace> t = Azure(
      "2023-11-16 18:15:46.6805900,374,44\n"
      "2023-11-16 18:15:50.9951690,396,109\n"
      "2023-11-16 19:00:00,10,0\n");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->name, "conv");
  ASSERT_EQ(t->requests.size(), 3u);
  EXPECT_DOUBLE_EQ(t->requests[0].arrival_s, 0);
  EXPECT_NEAR(t->requests[1].arrival_s, 4.314579, 1e-6);
  EXPECT_NEAR(t->requests[2].arrival_s, 2653.3194100, 1e-6);
  EXPECT_EQ(t->requests[1].prompt_tokens, 396);
  EXPECT_EQ(t->requests[1].output_tokens, 109);
  EXPECT_EQ(t->block_tokens, 0);
}

TEST(ServingTraceTest, AzureErrorsNameLineAndColumn) {
  struct Case {
    const char* rows;
    const char* want;
  };
  const Case cases[] = {
      {"2023-11-16 18:15:46.68,374,44\n2023-11-16 18:15:47,abc,1\n", ":3: ContextTokens"},
      {"2023-11-16 18:15:46.68,374,-4\n", ":2: GeneratedTokens"},
      {"2023-13-16 18:15:46,374,4\n", ":2: TIMESTAMP"},
      {"yesterday,374,4\n", ":2: TIMESTAMP"},
      {"2023-11-16 18:15:46,1,1\n2023-11-16 18:15:40,1,1\n", ":3: TIMESTAMP: goes back in time"},
      {"2023-11-16 18:15:46,1\n", ":2:"},
  };
  for (const Case& c : cases) {
    StatusOr<ServingTrace> t = Azure(c.rows);
    ASSERT_FALSE(t.ok()) << c.rows;
    EXPECT_NE(t.status().message().find(c.want), std::string::npos) << t.status().message();
  }
  StatusOr<CsvTable> no_col = CsvTable::Parse("TIMESTAMP,ContextTokens\nx,1\n", "t.csv");
  ASSERT_TRUE(no_col.ok());
  EXPECT_FALSE(ParseAzureLlmTrace(*no_col).ok());
  EXPECT_FALSE(Azure("").ok());  // no requests
  EXPECT_EQ(LoadAzureLlmTrace("/nonexistent/trace.csv").status().code(), StatusCode::kNotFound);
}

TEST(ServingTraceTest, ParsesMooncakeJsonLines) {
  StatusOr<ServingTrace> t = ParseMooncakeTrace(
      "{\"timestamp\": 1000, \"input_length\": 1024, \"output_length\": 5, \"hash_ids\": [0, 1]}\n"
      "\n"
      "{\"timestamp\": 500, \"input_length\": 600, \"output_length\": 7, \"hash_ids\": [0, 2]}\n",
      "conversation_trace.jsonl");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->name, "conversation_trace");
  EXPECT_EQ(t->block_tokens, 512);
  ASSERT_EQ(t->requests.size(), 2u);
  // Sorted by arrival, relative to the first.
  EXPECT_DOUBLE_EQ(t->requests[0].arrival_s, 0);
  EXPECT_DOUBLE_EQ(t->requests[1].arrival_s, 0.5);
  EXPECT_EQ(t->requests[0].prompt_tokens, 600);
  EXPECT_EQ(t->requests[0].block_hashes, (std::vector<uint64_t>{0, 2}));
}

TEST(ServingTraceTest, MooncakeErrorsNameTheLine) {
  struct Case {
    const char* text;
    const char* want;
  };
  const Case cases[] = {
      {"{\"timestamp\": 0, \"input_length\": 1, \"output_length\": 1}\nnot json\n", "t.jsonl:2: not a JSON object"},
      {"[1, 2]\n", "t.jsonl:1: not a JSON object"},
      {"{\"input_length\": 1, \"output_length\": 1}\n", "t.jsonl:1: timestamp: missing"},
      {"{\"timestamp\": 0, \"input_length\": -1, \"output_length\": 1}\n", "t.jsonl:1: input_length: must be"},
      {"{\"timestamp\": 0, \"input_length\": 1.5, \"output_length\": 1}\n", "input_length: must be a non-negative integer"},
      {"{\"timestamp\": 0, \"input_length\": 1, \"output_length\": 1, \"hash_ids\": [1, \"x\"]}\n", "t.jsonl:1: hash_ids"},
      {"{\"timestamp\": 0, \"input_length\": 1, \"output_length\": 1, \"hash_ids\": 3}\n", "hash_ids"},
      {"\n\n", "t.jsonl: no requests"},
  };
  for (const Case& c : cases) {
    StatusOr<ServingTrace> t = ParseMooncakeTrace(c.text, "t.jsonl");
    ASSERT_FALSE(t.ok()) << c.text;
    EXPECT_NE(t.status().message().find(c.want), std::string::npos) << t.status().message();
  }
}

TEST(ServingTraceTest, BundledTracesLoad) {
  const std::string dir = std::string(AICLOUD_SOURCE_DIR) + "/data/traces/";
  StatusOr<ServingTrace> conv = LoadAzureLlmTrace(dir + "azure-llm-inference-2023/AzureLLMInferenceTrace_conv.csv");
  ASSERT_TRUE(conv.ok()) << conv.status();
  EXPECT_EQ(conv->requests.size(), 19366u);
  EXPECT_NEAR(conv->span_s(), 3502, 1);
  StatusOr<ServingTrace> code = LoadAzureLlmTrace(dir + "azure-llm-inference-2023/AzureLLMInferenceTrace_code.csv");
  ASSERT_TRUE(code.ok()) << code.status();
  EXPECT_EQ(code->requests.size(), 8819u);
  StatusOr<ServingTrace> moon = LoadMooncakeTrace(dir + "mooncake-fast25/conversation_trace.jsonl");
  ASSERT_TRUE(moon.ok()) << moon.status();
  EXPECT_EQ(moon->requests.size(), 12031u);
  for (const ServingRequest& r : moon->requests) {
    ASSERT_EQ(static_cast<int>(r.block_hashes.size()), (r.prompt_tokens + 511) / 512);
  }
}

TEST(ServingTraceTest, Timestamps) {
  EXPECT_DOUBLE_EQ(*ParseTraceTimestamp("1970-01-01 00:00:00"), 0);
  EXPECT_DOUBLE_EQ(*ParseTraceTimestamp("1970-01-02 00:00:01.5"), 86401.5);
  EXPECT_DOUBLE_EQ(*ParseTraceTimestamp("2024-03-01 00:00:00") - *ParseTraceTimestamp("2024-02-28 00:00:00"), 2 * 86400);
  EXPECT_FALSE(ParseTraceTimestamp("2023-11-16 18:15:46.").ok());
  EXPECT_FALSE(ParseTraceTimestamp("2023-11-16 18:15:46.1x").ok());
  EXPECT_FALSE(ParseTraceTimestamp("2023-11-16").ok());
}

}  // namespace
}  // namespace aicloud::sim
