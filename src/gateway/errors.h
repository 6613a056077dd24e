// OpenAI-shaped error answers of the gateway: {"error": {"message", "type", "param", "code"}},
// the shape OpenAI SDKs parse (they raise AuthenticationError, PermissionDeniedError,
// NotFoundError, RateLimitError ... by status), so callers get the same errors through the
// gateway as from OpenAI or vLLM.
//
//   return OpenAiError(429, "rate_limit_exceeded", "key k1: 60 requests per minute", {}, 12);
#pragma once

#include <string>
#include <string_view>

#include "core/status.h"
#include "http/message.h"

namespace aicloud::gateway {

// type is derived from the status: 400 invalid_request_error, 401 authentication_error,
// 403 permission_denied_error, 404 not_found_error, 429 rate_limit_error (OpenAI's
// "insufficient_quota" code for budgets), 5xx api_error. retry_after_s > 0 adds Retry-After.
http::Response OpenAiError(int status, std::string_view code, std::string_view message,
                           std::string_view param = {}, int retry_after_s = 0);

// Maps a Status (INVALID_ARGUMENT 400, UNAUTHENTICATED 401, PERMISSION_DENIED 403, NOT_FOUND 404,
// RESOURCE_EXHAUSTED 429, UNAVAILABLE 503, DEADLINE_EXCEEDED 504 ...).
http::Response OpenAiError(const Status& status, std::string_view code = {}, int retry_after_s = 0);

}  // namespace aicloud::gateway
