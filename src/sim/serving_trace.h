// Readers for LLM request traces: the Azure LLM inference trace 2023 (Splitwise; CSV with
// TIMESTAMP,ContextTokens,GeneratedTokens) and the Mooncake FAST'25 traces (JSON Lines with
// timestamp in ms, input_length, output_length, hash_ids of 512-token prefix blocks).
// Both yield ServingRequests with arrival times in seconds from the trace's first request.
//
//   StatusOr<ServingTrace> t = LoadAzureLlmTrace("data/traces/azure-llm-inference-2023/"
//                                                "AzureLLMInferenceTrace_conv.csv");
//   StatusOr<ServingTrace> m = LoadMooncakeTrace("data/traces/mooncake-fast25/conversation_trace.jsonl");
//
// Malformed rows are errors naming `file:line:` and what is wrong (a missing column, a token
// count that is not a non-negative integer, a timestamp that does not parse, arrivals going
// backwards in the Azure files, which are sorted).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/csv.h"
#include "core/status.h"

namespace aicloud::sim {

struct ServingRequest {
  double arrival_s = 0;
  int prompt_tokens = 0;
  int output_tokens = 0;
  std::vector<uint64_t> block_hashes;  // chained prefix-block ids; empty when the trace has none
};

struct ServingTrace {
  std::string name;            // "conv", "code", or the file's stem
  int block_tokens = 0;        // tokens per entry of block_hashes (512 for Mooncake), 0 = none
  std::vector<ServingRequest> requests;  // by arrival time
  double span_s() const { return requests.empty() ? 0 : requests.back().arrival_s; }
};

StatusOr<ServingTrace> LoadAzureLlmTrace(const std::string& path);
StatusOr<ServingTrace> ParseAzureLlmTrace(const CsvTable& table);
StatusOr<ServingTrace> LoadMooncakeTrace(const std::string& path);
// `name` stands for the path in error messages.
StatusOr<ServingTrace> ParseMooncakeTrace(std::string_view text, const std::string& name);

// "2023-11-16 18:15:46.6805900" -> seconds since 1970-01-01 (no time zone; only differences
// are used). InvalidArgument for anything else.
StatusOr<double> ParseTraceTimestamp(std::string_view text);

}  // namespace aicloud::sim
