#include "engine/tokenizer/py_json.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace aicloud::engine {
namespace {

void String(const std::string& s, std::string* out) {
  out->push_back('"');
  for (unsigned char c : s) {
    switch (c) {
      case '"': *out += "\\\""; break;
      case '\\': *out += "\\\\"; break;
      case '\n': *out += "\\n"; break;
      case '\r': *out += "\\r"; break;
      case '\t': *out += "\\t"; break;
      case '\b': *out += "\\b"; break;
      case '\f': *out += "\\f"; break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\u%04x", c);
          *out += buf;
        } else {
          out->push_back(static_cast<char>(c));
        }
    }
  }
  out->push_back('"');
}

void Float(double v, std::string* out) {
  if (std::isnan(v)) {
    *out += "NaN";
    return;
  }
  if (std::isinf(v)) {
    *out += v > 0 ? "Infinity" : "-Infinity";
    return;
  }
  // repr(): the fewest significant digits that read back the same value, written in fixed
  // notation when the decimal exponent is in [-4, 16), else as d.ddde+XX.
  char buf[40];
  int digits = 1;
  for (; digits <= 17; ++digits) {
    std::snprintf(buf, sizeof(buf), "%.*e", digits - 1, v);
    if (std::strtod(buf, nullptr) == v) break;
  }
  const char* e = std::strchr(buf, 'e');
  const int exp = std::atoi(e + 1);
  std::string s;
  if (exp >= -4 && exp < 16) {
    std::snprintf(buf, sizeof(buf), "%.*f", std::max(0, digits - 1 - exp), v);
    s = buf;
    if (s.find('.') == std::string::npos) s += ".0";
  } else {
    std::string mantissa(buf, static_cast<size_t>(e - buf));
    std::snprintf(buf, sizeof(buf), "e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
    s = mantissa + buf;
  }
  *out += s;
}

void Dump(const nlohmann::ordered_json& v, int indent, int depth, std::string* out) {
  auto newline = [&](int level) {
    out->push_back('\n');
    out->append(static_cast<size_t>(indent * level), ' ');
  };
  switch (v.type()) {
    case nlohmann::json::value_t::object: {
      if (v.empty()) {
        *out += "{}";
        return;
      }
      out->push_back('{');
      bool first = true;
      for (const auto& [k, x] : v.items()) {
        if (!first) out->push_back(',');
        if (indent >= 0) {
          newline(depth + 1);
        } else if (!first) {
          out->push_back(' ');
        }
        first = false;
        String(k, out);
        *out += ": ";
        Dump(x, indent, depth + 1, out);
      }
      if (indent >= 0) newline(depth);
      out->push_back('}');
      return;
    }
    case nlohmann::json::value_t::array: {
      if (v.empty()) {
        *out += "[]";
        return;
      }
      out->push_back('[');
      bool first = true;
      for (const auto& x : v) {
        if (!first) out->push_back(',');
        if (indent >= 0) {
          newline(depth + 1);
        } else if (!first) {
          out->push_back(' ');
        }
        first = false;
        Dump(x, indent, depth + 1, out);
      }
      if (indent >= 0) newline(depth);
      out->push_back(']');
      return;
    }
    case nlohmann::json::value_t::string:
      String(v.get_ref<const std::string&>(), out);
      return;
    case nlohmann::json::value_t::boolean:
      *out += v.get<bool>() ? "true" : "false";
      return;
    case nlohmann::json::value_t::number_integer:
      *out += std::to_string(v.get<int64_t>());
      return;
    case nlohmann::json::value_t::number_unsigned:
      *out += std::to_string(v.get<uint64_t>());
      return;
    case nlohmann::json::value_t::number_float:
      Float(v.get<double>(), out);
      return;
    default:
      *out += "null";
  }
}

}  // namespace

std::string PyJsonDumps(const nlohmann::ordered_json& value, int indent) {
  std::string out;
  Dump(value, indent, 0, &out);
  return out;
}

}  // namespace aicloud::engine
