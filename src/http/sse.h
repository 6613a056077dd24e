// SseParser: turns a Server-Sent Events byte stream into events, however the bytes are split.
//
//   SseParser parser;
//   client.Stream("GET", "/api/v1/watch", "", {}, [&](std::string_view bytes) {
//     for (const SseEvent& e : parser.Feed(bytes)) Handle(e.event, e.data);
//     return true;
//   });
//
// Follows the EventSource rules that matter here: "field: value" lines (one leading space
// dropped), several data lines joined by '\n', ':' comment lines ignored, CRLF or LF line ends,
// an event dispatched at a blank line when it has data or an event name. Unlike EventSource,
// `id` is per event (not carried over to later events).
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace aicloud::http {

struct SseEvent {
  std::string event, data, id;
};

// Thread-compatible.
class SseParser {
 public:
  std::vector<SseEvent> Feed(std::string_view bytes);

 private:
  void Line(std::string_view line, std::vector<SseEvent>& out);

  std::string partial_;  // bytes of an unfinished line
  SseEvent current_;
  bool has_data_ = false;
};

}  // namespace aicloud::http
