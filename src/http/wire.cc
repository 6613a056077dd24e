#include "http/wire.h"

#include <array>
#include <charconv>
#include <cstring>

namespace aicloud::http {
namespace {

// RFC 9110 tchar: letters, digits and !#$%&'*+-.^_`|~ (a table: heads check every name).
constexpr std::array<bool, 256> kTokenChars = [] {
  std::array<bool, 256> t{};
  for (int c = 'a'; c <= 'z'; ++c) t[c] = true;
  for (int c = 'A'; c <= 'Z'; ++c) t[c] = true;
  for (int c = '0'; c <= '9'; ++c) t[c] = true;
  for (unsigned char c : std::string_view("!#$%&'*+-.^_`|~")) t[c] = true;
  return t;
}();

bool IsTokenChar(unsigned char c) { return kTokenChars[c]; }

// Bytes a field value may hold: all but the control characters (tab aside) and DEL.
constexpr std::array<bool, 256> kValueChars = [] {
  std::array<bool, 256> t{};
  for (int c = 0; c < 256; ++c) t[c] = (c >= 0x20 || c == '\t') && c != 0x7f;
  return t;
}();


void AppendNumber(std::string* out, size_t v) {
  char buf[24];
  auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), v);
  out->append(buf, end);
}

}  // namespace

bool AsciiIEquals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    char x = a[i], y = b[i];
    if (x >= 'A' && x <= 'Z') x = static_cast<char>(x + 32);
    if (y >= 'A' && y <= 'Z') y = static_cast<char>(y + 32);
    if (x != y) return false;
  }
  return true;
}

bool IsHttpToken(std::string_view s) {
  if (s.empty()) return false;
  for (char c : s) {
    if (!IsTokenChar(static_cast<unsigned char>(c))) return false;
  }
  return true;
}

bool IsSafeFieldValue(std::string_view s) {
  for (char c : s) {
    if (!kValueChars[static_cast<unsigned char>(c)]) return false;
  }
  return true;
}

bool IsSafeTarget(std::string_view s) {
  if (s.empty()) return false;
  for (char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (u <= 0x20 || u >= 0x7f) return false;
  }
  return true;
}

std::string_view ReasonPhrase(int status) {
  switch (status) {
    case 100: return "Continue";
    case 101: return "Switching Protocols";
    case 200: return "OK";
    case 201: return "Created";
    case 202: return "Accepted";
    case 204: return "No Content";
    case 205: return "Reset Content";
    case 206: return "Partial Content";
    case 207: return "Multi-Status";
    case 301: return "Moved Permanently";
    case 302: return "Found";
    case 303: return "See Other";
    case 304: return "Not Modified";
    case 307: return "Temporary Redirect";
    case 308: return "Permanent Redirect";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 402: return "Payment Required";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 406: return "Not Acceptable";
    case 408: return "Request Timeout";
    case 409: return "Conflict";
    case 410: return "Gone";
    case 411: return "Length Required";
    case 412: return "Precondition Failed";
    case 413: return "Payload Too Large";
    case 414: return "URI Too Long";
    case 415: return "Unsupported Media Type";
    case 416: return "Range Not Satisfiable";
    case 417: return "Expectation Failed";
    case 418: return "I'm a teapot";
    case 421: return "Misdirected Request";
    case 422: return "Unprocessable Content";
    case 425: return "Too Early";
    case 426: return "Upgrade Required";
    case 428: return "Precondition Required";
    case 429: return "Too Many Requests";
    case 431: return "Request Header Fields Too Large";
    case 451: return "Unavailable For Legal Reasons";
    case 500: return "Internal Server Error";
    case 501: return "Not Implemented";
    case 502: return "Bad Gateway";
    case 503: return "Service Unavailable";
    case 504: return "Gateway Timeout";
    case 505: return "HTTP Version Not Supported";
    case 507: return "Insufficient Storage";
    default: return "Unknown";
  }
}

void AppendField(std::string* out, std::string_view name, std::string_view value) {
  if (!IsHttpToken(name) || !IsSafeFieldValue(value)) return;
  // One resize and two copies instead of four appends (heads are written on every answer).
  const size_t at = out->size();
  out->resize(at + name.size() + value.size() + 4);
  char* p = out->data() + at;
  std::memcpy(p, name.data(), name.size());
  p += name.size();
  *p++ = ':';
  *p++ = ' ';
  std::memcpy(p, value.data(), value.size());
  p += value.size();
  *p++ = '\r';
  *p = '\n';
}

bool StatusHasNoBody(int status) { return status / 100 == 1 || status == 204 || status == 304; }

void AppendResponseHead(std::string* out, const ResponseHead& head) {
  const int status = head.status >= 100 && head.status <= 999 ? head.status : 500;
  std::string_view content_type = head.content_type;
  if (head.headers != nullptr) {
    for (const auto& [name, value] : *head.headers) {
      if (AsciiIEquals(name, "content-type") && IsSafeFieldValue(value)) content_type = value;
    }
  }
  size_t room = 96 + content_type.size();
  if (head.headers != nullptr) {
    for (const auto& [name, value] : *head.headers) room += name.size() + value.size() + 4;
  }
  out->reserve(out->size() + room);
  out->append("HTTP/1.1 ");
  AppendNumber(out, static_cast<size_t>(status));
  out->push_back(' ');
  out->append(ReasonPhrase(status)).append("\r\n");
  out->append("Server: aicloud\r\n");
  AppendField(out, "Content-Type", content_type);
  if (head.headers != nullptr) {
    for (const auto& [name, value] : *head.headers) {
      if (AsciiIEquals(name, "connection") || AsciiIEquals(name, "content-length") ||
          AsciiIEquals(name, "transfer-encoding") || AsciiIEquals(name, "content-type")) {
        continue;
      }
      AppendField(out, name, value);
    }
  }
  if (!head.keep_alive) out->append("Connection: close\r\n");
  if (!StatusHasNoBody(status)) {
    out->append("Content-Length: ");
    AppendNumber(out, head.body_size);
    out->append("\r\n");
  }
  out->append("\r\n");
}

std::string RequestHeadText(const RequestHead& head, std::string* error) {
  if (!IsHttpToken(head.method)) {
    *error = "bad method \"" + std::string(head.method) + "\"";
    return {};
  }
  if (!IsSafeTarget(head.target)) {
    *error = "bad request target \"" + std::string(head.target) + "\"";
    return {};
  }
  if (!IsSafeFieldValue(head.host)) {
    *error = "bad host \"" + std::string(head.host) + "\"";
    return {};
  }
  std::string out;
  size_t room = 128 + head.target.size() + head.host.size();
  if (head.headers != nullptr) {
    for (const auto& [name, value] : *head.headers) room += name.size() + value.size() + 4;
  }
  out.reserve(room);
  out.append(head.method).push_back(' ');
  out.append(head.target).append(" HTTP/1.1\r\n");
  out.append("Host: ").append(head.host).append("\r\n");
  out.append("User-Agent: aicloud-http\r\n");
  bool has_type = false;
  if (head.headers != nullptr) {
    for (const auto& [name, value] : *head.headers) {
      if (AsciiIEquals(name, "host") || AsciiIEquals(name, "content-length") ||
          AsciiIEquals(name, "transfer-encoding")) {
        continue;
      }
      if (AsciiIEquals(name, "content-type") && IsSafeFieldValue(value)) has_type = true;
      AppendField(&out, name, value);
    }
  }
  if (head.body_size > 0 && !has_type) out.append("Content-Type: application/json\r\n");
  if (head.body_size > 0 || head.send_length) {
    out.append("Content-Length: ");
    AppendNumber(&out, head.body_size);
    out.append("\r\n");
  }
  out.append("\r\n");
  return out;
}

}  // namespace aicloud::http
