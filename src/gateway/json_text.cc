#include "gateway/json_text.h"

#include <simdjson.h>

#include <charconv>
#include <cmath>
#include <cstdlib>

#include <nlohmann/json.hpp>

namespace aicloud::gateway {

void AppendJsonString(std::string* out, std::string_view s) {
  if (!simdjson::validate_utf8(s.data(), s.size())) {
    out->append(nlohmann::json(std::string(s)).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
    return;
  }
  static constexpr char kHex[] = "0123456789abcdef";
  out->push_back('"');
  size_t plain = 0;  // start of the run of bytes that need no escape
  for (size_t i = 0; i < s.size(); ++i) {
    const auto u = static_cast<unsigned char>(s[i]);
    if (u >= 0x20 && u != '"' && u != '\\') continue;
    out->append(s.data() + plain, i - plain);
    plain = i + 1;
    switch (u) {
      case '"': out->append("\\\""); break;
      case '\\': out->append("\\\\"); break;
      case '\b': out->append("\\b"); break;
      case '\f': out->append("\\f"); break;
      case '\n': out->append("\\n"); break;
      case '\r': out->append("\\r"); break;
      case '\t': out->append("\\t"); break;
      default:
        out->append("\\u00");
        out->push_back(kHex[u >> 4]);
        out->push_back(kHex[u & 15]);
    }
  }
  out->append(s.data() + plain, s.size() - plain);
  out->push_back('"');
}

void AppendJsonDouble(std::string* out, double v) {
  if (!std::isfinite(v)) {
    out->append("null");
    return;
  }
  if (v == 0) {
    out->append(std::signbit(v) ? "-0.0" : "0.0");
    return;
  }
  // Shortest round-trip digits, in scientific form: [-]d[.ddd]e±XX.
  char sci[32];
  auto [end, ec] = std::to_chars(sci, sci + sizeof(sci), v, std::chars_format::scientific);
  std::string_view text(sci, static_cast<size_t>(end - sci));
  if (text.front() == '-') {
    out->push_back('-');
    text.remove_prefix(1);
  }
  const size_t e_at = text.find('e');
  const int exponent = std::atoi(std::string(text.substr(e_at + 1)).c_str());
  std::string digits;
  for (char c : text.substr(0, e_at)) {
    if (c != '.') digits.push_back(c);
  }
  const int k = static_cast<int>(digits.size());
  const int n = exponent + 1;  // the decimal point sits after n digits
  if (k <= n && n <= 15) {  // a whole number: digits, zeros, ".0"
    out->append(digits).append(static_cast<size_t>(n - k), '0').append(".0");
  } else if (0 < n && n <= 15) {  // the point inside the digits
    out->append(digits, 0, static_cast<size_t>(n)).push_back('.');
    out->append(digits, static_cast<size_t>(n));
  } else if (-4 < n && n <= 0) {  // 0.000ddd
    out->append("0.").append(static_cast<size_t>(-n), '0').append(digits);
  } else {  // d.ddde±XX
    out->push_back(digits[0]);
    if (k > 1) out->push_back('.'), out->append(digits, 1);
    const int e = n - 1;
    out->push_back('e');
    out->push_back(e < 0 ? '-' : '+');
    const int a = std::abs(e);
    if (a < 10) out->push_back('0');
    out->append(std::to_string(a));
  }
}

}  // namespace aicloud::gateway
