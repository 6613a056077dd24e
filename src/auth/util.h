// Internal to the auth room: time formatting/parsing and string hygiene shared by auth.cc and
// audit.cc.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace aicloud::auth::internal {

// "2024-05-01T12:00:00Z" (with_ms=false) or "2024-05-01T12:00:00.123Z", UTC.
std::string FormatRfc3339(std::chrono::system_clock::time_point t, bool with_ms);
// Accepts "YYYY-MM-DDTHH:MM:SS[.frac](Z|+HH:MM|-HH:MM)" ('t'/'z' and ' ' separator too).
std::optional<std::chrono::system_clock::time_point> ParseRfc3339(std::string_view s);
// `s` with invalid UTF-8 sequences replaced by U+FFFD, so it can be stored and hashed.
std::string SanitizeUtf8(std::string_view s);

}  // namespace aicloud::auth::internal
