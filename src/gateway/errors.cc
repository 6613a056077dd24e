#include "gateway/errors.h"

#include <nlohmann/json.hpp>

namespace aicloud::gateway {
namespace {

const char* TypeOf(int status) {
  switch (status) {
    case 400: return "invalid_request_error";
    case 401: return "authentication_error";
    case 403: return "permission_denied_error";
    case 404: return "not_found_error";
    case 429: return "rate_limit_error";
    default: return status >= 500 ? "api_error" : "invalid_request_error";
  }
}

}  // namespace

http::Response OpenAiError(int status, std::string_view code, std::string_view message,
                           std::string_view param, int retry_after_s) {
  nlohmann::json err = {{"message", message},
                        {"type", TypeOf(status)},
                        {"param", param.empty() ? nlohmann::json(nullptr) : nlohmann::json(param)},
                        {"code", code.empty() ? nlohmann::json(nullptr) : nlohmann::json(code)}};
  http::Response r = http::Response::Json(status, {{"error", std::move(err)}});
  if (retry_after_s > 0) r.headers.emplace_back("Retry-After", std::to_string(retry_after_s));
  return r;
}

http::Response OpenAiError(const Status& status, std::string_view code, int retry_after_s) {
  return OpenAiError(http::HttpStatusOf(status), code, status.message(), {}, retry_after_s);
}

}  // namespace aicloud::gateway
