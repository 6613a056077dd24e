#include "engine/batch/request.h"

namespace aicloud::engine {

std::string_view FinishReasonName(FinishReason reason) {
  switch (reason) {
    case FinishReason::kEos: return "eos";
    case FinishReason::kStopToken: return "stop_token";
    case FinishReason::kStopString: return "stop_string";
    case FinishReason::kMaxTokens: return "max_tokens";
    case FinishReason::kLengthCap: return "length_cap";
    case FinishReason::kAborted: return "aborted";
  }
  return "unknown";
}

std::string_view OpenAiFinishReason(FinishReason reason) {
  switch (reason) {
    case FinishReason::kEos:
    case FinishReason::kStopToken:
    case FinishReason::kStopString: return "stop";
    case FinishReason::kMaxTokens:
    case FinishReason::kLengthCap: return "length";
    case FinishReason::kAborted: return "abort";
  }
  return "unknown";
}

}  // namespace aicloud::engine
