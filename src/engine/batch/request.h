// Requests as the scheduler sees them (token ids in, token ids out) and the per-request events
// it reports after every step, from which the server streams tokens and the metrics layer
// derives TTFT, inter-token latency, queue time and end-to-end latency.
//
// Lifecycle: WAITING -> RUNNING -> FINISHED, with RUNNING -> WAITING again on a preemption
// (the KV is dropped and recomputed on readmission; generated tokens are kept). A request can
// also finish while WAITING (abort).
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "engine/sample/sampler.h"
#include "engine/sample/sampling_params.h"

namespace aicloud::engine {

// Chosen by the caller (the server); unique among unfinished requests.
using RequestId = uint64_t;

struct Request {
  RequestId id = 0;
  std::vector<int32_t> prompt;  // token ids; non-empty
  SamplingParams sampling;
  int32_t adapter_id = 0;       // LoRA adapter; 0 = base model
  // Prefix-cache isolation (CacheScope::salt): requests with different salts never share KV.
  uint64_t cache_salt = 0;
  // When the server received the request (Clock micros), the start of TTFT and queue time.
  // -1: the time Add is called.
  int64_t arrival_micros = -1;
};

enum class FinishReason {
  kEos,         // the model's end-of-sequence token (not with ignore_eos)
  kStopToken,   // one of SamplingParams::stop_token_ids
  kStopString,  // the caller found a stop string in the text (Scheduler::Abort)
  kMaxTokens,   // SamplingParams::max_tokens generated
  kLengthCap,   // prompt + output reached the model's context (max_model_len)
  kAborted,     // the client went away, or the server cancelled it
};

// "eos", "stop_token", "stop_string", "max_tokens", "length_cap", "aborted".
std::string_view FinishReasonName(FinishReason reason);
// The OpenAI API's finish_reason (and vLLM's request_success label): "stop" for EOS, stop
// tokens and stop strings, "length" for max_tokens and the context cap, "abort" for aborts.
std::string_view OpenAiFinishReason(FinishReason reason);

// What the scheduler knows about a request's timing and size. Times are Clock micros, -1 until
// they happen.
struct RequestStats {
  int64_t arrival_micros = -1;
  int64_t first_scheduled_micros = -1;  // queue time = first_scheduled - arrival
  int64_t first_token_micros = -1;      // TTFT = first_token - arrival
  int64_t finished_micros = -1;         // e2e = finished - arrival
  int32_t num_prompt_tokens = 0;
  int32_t num_output_tokens = 0;
  int32_t num_cached_tokens = 0;  // prefix-cache hit at the first admission
  int32_t num_preemptions = 0;
};

// One event for one request out of Schedule (aborts) or Update (tokens, finishes).
struct RequestOutput {
  RequestId id = 0;
  // The token generated this step, with its logprobs when asked for. Absent on an abort.
  std::optional<SampleResult> sample;
  // Set on the request's last event. The request is gone from the scheduler afterwards.
  std::optional<FinishReason> finish;
  // When the scheduler recorded the event; inter-token latency = difference of consecutive
  // events of a request.
  int64_t time_micros = 0;
  RequestStats stats;  // as of this event
};

}  // namespace aicloud::engine
