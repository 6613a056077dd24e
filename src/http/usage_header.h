// The answer header by which an aicloud engine reports the tokens a unary completion used, so
// that the gateway can charge them without parsing the answer's body:
//
//   x-aicloud-usage: prompt_tokens=12, completion_tokens=9
//
// The value is an RFC 8941 dictionary of two non-negative integers, and it always repeats the
// body's "usage" object. The gateway takes it when it reads exactly as UsageHeaderValue writes it
// and reads the body otherwise (an engine of another make, an older engine, a damaged value).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace aicloud::http {

inline constexpr std::string_view kUsageHeader = "x-aicloud-usage";

struct UsageCounts {
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
};

// "prompt_tokens=P, completion_tokens=C"; a negative count is written as 0.
std::string UsageHeaderValue(UsageCounts usage);

// The counts of a value UsageHeaderValue wrote: those two members in that order, each a run of 1
// to 15 digits (RFC 8941's integer range), nothing else. nullopt for anything else.
std::optional<UsageCounts> ParseUsageHeader(std::string_view value);

}  // namespace aicloud::http
