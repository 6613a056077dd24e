// JsonNestsWithin: whether JSON text nests arrays and objects no deeper than a limit, decided on
// the raw text without parsing it. Request handlers check a body with it before handing it to a
// parser: nlohmann and simdjson parse deep documents, but copying, dumping or walking one
// recurses once per level, and a body of a million '[' would take the process down.
//
//   if (!JsonNestsWithin(req.body, 64)) return InvalidArgumentError("body: nested deeper than 64 levels");
//
// Brackets inside strings (escapes included) do not count. Text that is not JSON gives some
// answer; the parser that follows rejects it.
//
// Thread-safety: a pure function.
#pragma once

#include <string_view>

namespace aicloud {

inline bool JsonNestsWithin(std::string_view text, int max_depth) {
  int depth = 0;
  bool in_string = false, escaped = false;
  for (char c : text) {
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      if (++depth > max_depth) return false;
    } else if (c == '}' || c == ']') {
      --depth;
    }
  }
  return true;
}

}  // namespace aicloud
