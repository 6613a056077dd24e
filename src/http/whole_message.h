// A whole HTTP/1.x message with simple framing, read in one step: the head by picohttpparser
// (the phr_* functions of Debian's libh2o-evloop), the body as the Content-Length bytes that
// follow it. The server and the pooled upstream client try this first on a fresh message and
// give everything else to Beast's parser, which reads it in pieces:
//
//   size_t used = ReadWholeRequest(bytes, limits, &req, &info);
//   if (used == 0) { /* not whole, or not simple: Beast's parser reads it from the same bytes */ }
//
// "Simple" is deliberately narrow, so that this path only ever takes a message Beast would take
// the same way: CRLF line ends, HTTP/1.0 or 1.1, no Transfer-Encoding, at most one
// Content-Length (digits only), a Connection field that is exactly "close" or "keep-alive" if
// any, no Proxy-Connection, no Expect, no obs-fold, a method that is a token and a visible-ASCII
// target; answers:
// a final status other than 204 and 304, a Content-Length, not to a HEAD request. Within the
// head and body limits. A message outside that is never half-read: 0 is returned and the output
// is left as it was.
//
// Why: fewer instructions, and less code walked, per proxied request (bench/RESULTS.md 8.18).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "http/client.h"   // ClientResponse
#include "http/message.h"  // Request

namespace aicloud::http {

struct WholeRequestLimits {
  size_t max_header_bytes = 8192;  // the request line and fields, blank line included
  uint64_t max_body_bytes = 0;
};

struct WholeRequestInfo {
  bool keep_alive = true;   // HTTP/1.1 without "Connection: close", or 1.0 with "keep-alive"
  bool head_method = false;  // a HEAD request: its answer carries no body
};

// Bytes of `data` that one whole simple request took, its method, target, fields (as
// HeaderMap::Add stores them) and body written into *req; 0, with *req untouched, otherwise.
size_t ReadWholeRequest(std::string_view data, const WholeRequestLimits& limits, Request* req, WholeRequestInfo* info);

// Bytes of `data` that one whole simple answer took, its status, fields and body written into
// *out and whether the connection stays open into *keep_alive; 0, with *out untouched, otherwise
// (also for an interim 1xx answer, and always when `head_request`).
size_t ReadWholeResponse(std::string_view data, bool head_request, ClientResponse* out, bool* keep_alive);

}  // namespace aicloud::http
