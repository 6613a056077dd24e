#include "http/sse.h"

namespace aicloud::http {

std::vector<SseEvent> SseParser::Feed(std::string_view bytes) {
  std::vector<SseEvent> out;
  partial_.append(bytes);
  size_t start = 0;
  while (true) {
    size_t nl = partial_.find('\n', start);
    if (nl == std::string::npos) break;
    std::string_view line(partial_.data() + start, nl - start);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    Line(line, out);
    start = nl + 1;
  }
  partial_.erase(0, start);
  return out;
}

void SseParser::Line(std::string_view line, std::vector<SseEvent>& out) {
  if (line.empty()) {
    if (has_data_ || !current_.event.empty()) out.push_back(std::move(current_));
    current_ = SseEvent();
    has_data_ = false;
    return;
  }
  if (line.front() == ':') return;  // comment / heartbeat
  size_t colon = line.find(':');
  std::string_view field = line.substr(0, colon);
  std::string_view value;
  if (colon != std::string_view::npos) {
    value = line.substr(colon + 1);
    if (!value.empty() && value.front() == ' ') value.remove_prefix(1);
  }
  if (field == "data") {
    if (has_data_) current_.data += '\n';
    current_.data.append(value);
    has_data_ = true;
  } else if (field == "event") {
    current_.event.assign(value);
  } else if (field == "id") {
    current_.id.assign(value);
  }
}

}  // namespace aicloud::http
