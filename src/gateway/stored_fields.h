// Fields of the gateway's stored objects (GatewayBudget, GatewayRate), read defensively: an
// object edited by hand or written by a foreign tool must not throw (json::value does on a type
// mismatch) or unbalance the arithmetic. Internal to the gateway room.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "store/store.h"

namespace aicloud::gateway::stored {

// A non-negative integer; 0 when missing, negative, NaN or not a number.
inline int64_t IntField(const store::json& o, const char* key) {
  auto it = o.find(key);  // end() for a non-object too
  if (it == o.end()) return 0;
  if (it->is_number_integer()) return std::max<int64_t>(0, it->get<int64_t>());
  if (it->is_number_float()) {
    const double d = it->get<double>();
    if (!(d > 0)) return 0;  // negative, zero or NaN
    return d < 1e18 ? static_cast<int64_t>(d) : int64_t{1} << 60;
  }
  return 0;
}

// An integer of either sign; `missing` when absent or not an integer.
inline int64_t SignedIntField(const store::json& o, const char* key, int64_t missing) {
  auto it = o.find(key);
  return it != o.end() && it->is_number_integer() ? it->get<int64_t>() : missing;
}

// A finite non-negative number; 0 otherwise.
inline double NumField(const store::json& o, const char* key) {
  auto it = o.find(key);
  if (it == o.end() || !it->is_number()) return 0;
  const double d = it->get<double>();
  return std::isfinite(d) && d > 0 ? d : 0;
}

// A member object; an empty object when absent or not an object.
inline const store::json& ObjectField(const store::json& o, const char* key) {
  static const store::json kEmpty = store::json::object();
  auto it = o.find(key);
  return it != o.end() && it->is_object() ? *it : kEmpty;
}

}  // namespace aicloud::gateway::stored
