#include "http/whole_message.h"

#include <array>
#include <charconv>

#include "http/wire.h"

// picohttpparser's interface, as libh2o-evloop exports it (Debian installs the library without
// the parser's header).
extern "C" {
struct phr_header {
  const char* name;
  size_t name_len;
  const char* value;
  size_t value_len;
};
int phr_parse_request(const char* buf, size_t len, const char** method, size_t* method_len, const char** path,
                      size_t* path_len, int* minor_version, struct phr_header* headers, size_t* num_headers,
                      size_t last_len);
int phr_parse_response(const char* buf, size_t len, int* minor_version, int* status, const char** msg,
                       size_t* msg_len, struct phr_header* headers, size_t* num_headers, size_t last_len);
}

namespace aicloud::http {
namespace {

// More fields than this and the message goes to Beast (picohttpparser reports it as malformed).
constexpr size_t kMaxWholeFields = 64;

std::string_view TrimTrailing(std::string_view v) {
  while (!v.empty() && (v.back() == ' ' || v.back() == '\t')) v.remove_suffix(1);
  return v;
}

// What the framing fields of a head say, or that the message is not simple.
struct Framing {
  bool simple = true;
  bool has_length = false;
  uint64_t length = 0;
  int connection = 0;  // 0 none, 1 keep-alive, -1 close
};

// `head` is the whole head as picohttpparser measured it. Every line must end in CRLF (the
// parser also takes a bare LF, Beast does not): each field's line starts after a CR LF and the
// head ends in CR LF CR LF.
Framing ReadFraming(std::string_view head, const phr_header* fields, size_t n) {
  Framing f;
  if (head.size() < 4 || head.substr(head.size() - 4) != "\r\n\r\n") return Framing{.simple = false};
  for (size_t i = 0; i < n; ++i) {
    const phr_header& h = fields[i];
    if (h.name == nullptr || h.name - head.data() < 2 || h.name[-2] != '\r') return Framing{.simple = false};
    const std::string_view name(h.name, h.name_len);
    switch (name.size()) {
      case 6:  // expect: 100-continue wants an interim answer, which Beast's path sends
        if (AsciiIEquals(name, "expect")) return Framing{.simple = false};
        break;
      case 10:
        if (AsciiIEquals(name, "connection")) {
          const std::string_view v = TrimTrailing({h.value, h.value_len});
          if (f.connection != 0) return Framing{.simple = false};
          if (AsciiIEquals(v, "close")) {
            f.connection = -1;
          } else if (AsciiIEquals(v, "keep-alive")) {
            f.connection = 1;
          } else {
            return Framing{.simple = false};  // token lists, upgrade: Beast's
          }
        }
        break;
      case 14:
        if (AsciiIEquals(name, "content-length")) {
          const std::string_view v = TrimTrailing({h.value, h.value_len});
          if (f.has_length || v.empty() || v.size() > 18) return Framing{.simple = false};
          const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), f.length);
          if (ec != std::errc() || end != v.data() + v.size()) return Framing{.simple = false};  // digits only
          f.has_length = true;
        }
        break;
      case 16:  // Beast reads it as it reads Connection (keep-alive, close, token lists)
        if (AsciiIEquals(name, "proxy-connection")) return Framing{.simple = false};
        break;
      case 17:
        if (AsciiIEquals(name, "transfer-encoding")) return Framing{.simple = false};
        break;
      default:
        break;
    }
  }
  return f;
}

bool KeepAlive(const Framing& f, int minor_version) {
  return f.connection == 0 ? minor_version == 1 : f.connection == 1;
}

void AddFields(const phr_header* fields, size_t n, HeaderMap* out) {
  for (size_t i = 0; i < n; ++i) {
    // At most kMaxWholeFields, fewer than HeaderMap::kMaxFields: Add cannot refuse.
    out->Add({fields[i].name, fields[i].name_len}, TrimTrailing({fields[i].value, fields[i].value_len}));
  }
}

}  // namespace

size_t ReadWholeRequest(std::string_view data, const WholeRequestLimits& limits, Request* req, WholeRequestInfo* info) {
  const char* method = nullptr;
  const char* target = nullptr;
  size_t method_len = 0, target_len = 0, n = kMaxWholeFields;
  int minor = -1;
  std::array<phr_header, kMaxWholeFields> fields;
  const int got = phr_parse_request(data.data(), data.size(), &method, &method_len, &target, &target_len, &minor,
                                    fields.data(), &n, 0);
  if (got <= 0) return 0;  // incomplete (-2) or malformed (-1): Beast reads it, or says why not
  const auto head_bytes = static_cast<size_t>(got);
  if (head_bytes > limits.max_header_bytes || (minor != 0 && minor != 1)) return 0;
  // picohttpparser skips empty lines before the request line (RFC 9112 2.2 allows it); Beast
  // does not, so such a request is Beast's to refuse.
  if (method != data.data()) return 0;
  const std::string_view m(method, method_len), t(target, target_len);
  if (!IsHttpToken(m) || !IsSafeTarget(t)) return 0;
  const Framing f = ReadFraming(data.substr(0, head_bytes), fields.data(), n);
  if (!f.simple || f.length > limits.max_body_bytes || f.length > data.size() - head_bytes) return 0;
  req->method.assign(m);
  req->target.assign(t);
  AddFields(fields.data(), n, &req->headers);
  req->body.assign(data.data() + head_bytes, static_cast<size_t>(f.length));
  info->keep_alive = KeepAlive(f, minor);
  info->head_method = m == "HEAD";
  return head_bytes + static_cast<size_t>(f.length);
}

size_t ReadWholeResponse(std::string_view data, bool head_request, ClientResponse* out, bool* keep_alive) {
  if (head_request) return 0;
  const char* reason = nullptr;
  size_t reason_len = 0, n = kMaxWholeFields;
  int minor = -1, status = 0;
  std::array<phr_header, kMaxWholeFields> fields;
  const int got =
      phr_parse_response(data.data(), data.size(), &minor, &status, &reason, &reason_len, fields.data(), &n, 0);
  if (got <= 0 || !data.starts_with("HTTP/")) return 0;  // no empty lines before it, as for requests
  const auto head_bytes = static_cast<size_t>(got);
  if ((minor != 0 && minor != 1) || status < 200 || status > 999 || status == 204 || status == 304) return 0;
  const Framing f = ReadFraming(data.substr(0, head_bytes), fields.data(), n);
  // Without a length the body runs to the close: Beast's.
  if (!f.simple || !f.has_length || f.length > data.size() - head_bytes) return 0;
  out->status = status;
  AddFields(fields.data(), n, &out->headers);
  out->body.assign(data.data() + head_bytes, static_cast<size_t>(f.length));
  *keep_alive = KeepAlive(f, minor);
  return head_bytes + static_cast<size_t>(f.length);
}

}  // namespace aicloud::http
