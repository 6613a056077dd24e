#include "http/message.h"

#include <cctype>

namespace aicloud::http {

std::string Request::Header(std::string_view lower_name) const { return std::string(HeaderView(lower_name)); }

std::string_view Request::HeaderView(std::string_view lower_name) const {
  return headers.Get(lower_name);
}

std::string Request::Query(std::string_view name, std::string_view def) const {
  auto it = query.find(std::string(name));
  return it == query.end() ? std::string(def) : it->second;
}

std::string FormatSseEvent(std::string_view event, std::string_view data, std::string_view id) {
  std::string out;
  out.reserve(data.size() + event.size() + id.size() + 32);
  if (!id.empty()) out.append("id: ").append(id).append("\n");
  if (!event.empty()) out.append("event: ").append(event).append("\n");
  // Every line of data becomes its own "data:" field; the parser joins them with '\n'.
  size_t start = 0;
  while (true) {
    size_t nl = data.find('\n', start);
    std::string_view line = data.substr(start, nl == std::string_view::npos ? nl : nl - start);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    out.append("data: ").append(line).append("\n");
    if (nl == std::string_view::npos) break;
    start = nl + 1;
  }
  out.append("\n");
  return out;
}

bool StreamWriter::SendEvent(std::string_view event, std::string_view data, std::string_view id) {
  return Write(FormatSseEvent(event, data, id));
}

Response Response::Json(int status, const nlohmann::json& body) {
  Response r;
  r.status = status;
  r.body = body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  return r;
}

Response Response::Text(int status, std::string body, std::string content_type) {
  Response r;
  r.status = status;
  r.body = std::move(body);
  r.content_type = std::move(content_type);
  return r;
}

Response Response::Error(int status, std::string_view code, std::string_view message,
                         std::string_view field) {
  nlohmann::json err = {{"code", code}, {"message", message}};
  if (!field.empty()) err["field"] = field;
  return Json(status, {{"error", std::move(err)}});
}

int HttpStatusOf(const Status& status) {
  switch (status.code()) {
    case StatusCode::kOk: return 200;
    case StatusCode::kInvalidArgument:
    case StatusCode::kFailedPrecondition: return 400;
    case StatusCode::kOutOfRange: return 410;
    case StatusCode::kNotFound: return 404;
    case StatusCode::kAlreadyExists:
    case StatusCode::kAborted: return 409;
    case StatusCode::kPermissionDenied: return 403;
    case StatusCode::kUnauthenticated: return 401;
    case StatusCode::kResourceExhausted: return 429;
    case StatusCode::kUnavailable: return 503;
    case StatusCode::kDeadlineExceeded: return 504;
    case StatusCode::kUnimplemented: return 501;
    default: return 500;
  }
}

Response ErrorResponse(const Status& status, std::string_view field) {
  std::string code(StatusCodeName(status.code()));
  for (char& c : code) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return Response::Error(HttpStatusOf(status), code, status.message(), field);
}

namespace {

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

std::string PercentDecode(std::string_view s) {
  size_t i = s.find('%');
  if (i == std::string_view::npos) return std::string(s);  // most paths: nothing to decode
  std::string out;
  out.reserve(s.size());
  out.append(s.substr(0, i));
  for (; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size()) {
      int hi = HexValue(s[i + 1]), lo = HexValue(s[i + 2]);
      if (hi >= 0 && lo >= 0) {
        out.push_back(static_cast<char>(hi * 16 + lo));
        i += 2;
        continue;
      }
    }
    out.push_back(s[i]);
  }
  return out;
}

std::map<std::string, std::string> ParseQuery(std::string_view query) {
  std::map<std::string, std::string> out;
  auto decode = [](std::string_view part) {
    std::string plus(part);
    for (char& c : plus) if (c == '+') c = ' ';
    return PercentDecode(plus);
  };
  size_t start = 0;
  while (start <= query.size()) {
    size_t amp = query.find('&', start);
    std::string_view pair = query.substr(start, amp == std::string_view::npos ? amp : amp - start);
    if (!pair.empty()) {
      size_t eq = pair.find('=');
      if (eq == std::string_view::npos) {
        out[decode(pair)] = "";
      } else {
        out[decode(pair.substr(0, eq))] = decode(pair.substr(eq + 1));
      }
    }
    if (amp == std::string_view::npos) break;
    start = amp + 1;
  }
  return out;
}

}  // namespace aicloud::http
