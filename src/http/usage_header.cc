#include "http/usage_header.h"

#include <algorithm>
#include <charconv>

namespace aicloud::http {
namespace {

constexpr std::string_view kPrompt = "prompt_tokens=";
constexpr std::string_view kCompletion = ", completion_tokens=";
constexpr size_t kMaxDigits = 15;  // RFC 8941 sf-integer

// Reads 1..kMaxDigits digits at the front of `s` into *v and drops them; false if there are none
// or too many.
bool TakeCount(std::string_view* s, int64_t* v) {
  size_t n = 0;
  while (n < s->size() && (*s)[n] >= '0' && (*s)[n] <= '9') ++n;
  if (n == 0 || n > kMaxDigits) return false;
  std::from_chars(s->data(), s->data() + n, *v);  // cannot fail or overflow: 1..15 digits
  s->remove_prefix(n);
  return true;
}

}  // namespace

std::string UsageHeaderValue(UsageCounts usage) {
  std::string out(kPrompt);
  out += std::to_string(std::max<int64_t>(0, usage.prompt_tokens));
  out += kCompletion;
  out += std::to_string(std::max<int64_t>(0, usage.completion_tokens));
  return out;
}

std::optional<UsageCounts> ParseUsageHeader(std::string_view value) {
  UsageCounts u;
  if (!value.starts_with(kPrompt)) return std::nullopt;
  value.remove_prefix(kPrompt.size());
  if (!TakeCount(&value, &u.prompt_tokens) || !value.starts_with(kCompletion)) return std::nullopt;
  value.remove_prefix(kCompletion.size());
  if (!TakeCount(&value, &u.completion_tokens) || !value.empty()) return std::nullopt;
  return u;
}

}  // namespace aicloud::http
