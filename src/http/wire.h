// HTTP/1.1 message heads written as text: the request line or status line, the header fields and
// the blank line, ready to go out in one write together with the body. The server and the
// asynchronous client write their heads with these instead of building a field container and
// walking it with a serializer (Beast's serializer stays for streamed, chunked answers).
//
//   std::string head;
//   AppendResponseHead(&head, {.status = 200, .content_type = "application/json", .headers = &extra,
//                              .body_size = body.size()});
//   write(socket, {head, body});
//
// Fields whose name is not an HTTP token or whose value holds a control character (tab aside)
// are left out: a header is never a way to end the head early or to smuggle a second message.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <utility>  // std::pair
#include <vector>

namespace aicloud::http {

// RFC 9110 token (a method or a field name): one or more of ALPHA, DIGIT and !#$%&'*+-.^_`|~.
bool IsHttpToken(std::string_view s);
// A field value fit to write: no control characters but tab (no CR, LF, NUL, DEL).
bool IsSafeFieldValue(std::string_view s);
// A request target fit to write: not empty, visible ASCII only (no space, no control character,
// no byte above 0x7E: those must be percent-encoded).
bool IsSafeTarget(std::string_view s);
// Equal ignoring ASCII case ("Content-Length" and "content-length"); no locale is consulted.
bool AsciiIEquals(std::string_view a, std::string_view b);
// "OK" for 200, "Not Found" for 404, ...; "Unknown" for a code without a registered phrase.
std::string_view ReasonPhrase(int status);

// "Name: value\r\n", or nothing when the name or the value is not fit to write (see above).
void AppendField(std::string* out, std::string_view name, std::string_view value);

struct ResponseHead {
  int status = 200;  // outside 100..999 is written as 500
  std::string_view content_type;
  // Extra fields; connection, content-length and transfer-encoding are skipped (framing is the
  // writer's), and a content-type here (one fit to write) replaces `content_type`.
  const std::vector<std::pair<std::string, std::string>>* headers = nullptr;
  bool keep_alive = true;  // false adds "Connection: close"
  size_t body_size = 0;    // Content-Length, except for 1xx, 204 and 304, which carry no body
};

// "HTTP/1.1 <status> <reason>", Server: aicloud, Content-Type, the extra fields, Connection: close
// when not keeping alive, Content-Length, blank line.
void AppendResponseHead(std::string* out, const ResponseHead& head);
// True for the status codes whose answers carry no body (1xx, 204, 304).
bool StatusHasNoBody(int status);

struct RequestHead {
  std::string_view method, target, host;  // host as the Host field writes it ("h:8080", "[::1]:81")
  const std::vector<std::pair<std::string, std::string>>* headers = nullptr;  // extra fields
  size_t body_size = 0;
  bool send_length = false;  // write Content-Length even when the body is empty (POST, PUT, PATCH)
};

// "<method> <target> HTTP/1.1", Host, User-Agent: aicloud-http, the extra fields (host,
// content-length and transfer-encoding skipped), Content-Type: application/json when the body is
// not empty and no content-type is among them, Content-Length when the body is not empty or
// `send_length`, blank line. Empty, with a message in
// `error`, when the method is not a token, the target is not fit to write (IsSafeTarget) or
// the host holds a control character.
std::string RequestHeadText(const RequestHead& head, std::string* error);

}  // namespace aicloud::http
