#include "gateway/json_text.h"

#include <simdjson.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>

#include <nlohmann/json.hpp>

namespace aicloud::gateway {

void AppendJsonString(std::string* out, std::string_view s) {
  // Names, ids and numbers are ASCII, which is valid UTF-8 without asking simdjson.
  const bool ascii = std::all_of(s.begin(), s.end(), [](char c) { return static_cast<unsigned char>(c) < 0x80; });
  if (!ascii && !simdjson::validate_utf8(s.data(), s.size())) {
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
  std::string_view e_text = text.substr(e_at + 1);  // "+05", "-07"
  if (e_text.front() == '+') e_text.remove_prefix(1);
  int exponent = 0;
  std::from_chars(e_text.data(), e_text.data() + e_text.size(), exponent);
  char digit_buf[24];  // at most 17 significant digits
  size_t digit_count = 0;
  for (char c : text.substr(0, e_at)) {
    if (c != '.') digit_buf[digit_count++] = c;
  }
  const std::string_view digits(digit_buf, digit_count);
  const int k = static_cast<int>(digits.size());
  const int n = exponent + 1;  // the decimal point sits after n digits
  if (k <= n && n <= 15) {  // a whole number: digits, zeros, ".0"
    out->append(digits).append(static_cast<size_t>(n - k), '0').append(".0");
  } else if (0 < n && n <= 15) {  // the point inside the digits
    out->append(digits.substr(0, static_cast<size_t>(n))).push_back('.');
    out->append(digits.substr(static_cast<size_t>(n)));
  } else if (-4 < n && n <= 0) {  // 0.000ddd
    out->append("0.").append(static_cast<size_t>(-n), '0').append(digits);
  } else {  // d.ddde±XX
    out->push_back(digits[0]);
    if (k > 1) out->push_back('.'), out->append(digits.substr(1));
    const int e = n - 1;
    out->push_back('e');
    out->push_back(e < 0 ? '-' : '+');
    const int a = std::abs(e);
    if (a < 10) out->push_back('0');
    char exp_buf[8];
    auto [exp_end, exp_ec] = std::to_chars(exp_buf, exp_buf + sizeof(exp_buf), a);
    out->append(exp_buf, exp_end);
  }
}

}  // namespace aicloud::gateway
