// Checked access to JSON fields for the tokenizer's file parsers. Every error names the field's
// path ("model.merges[12]: ..."); the caller prefixes the file name, so a message reads
// "tokenizer.json: model.merges[12]: token "x" is not in model.vocab".
//
// None of these throw: types are checked before values are read.
#pragma once

#include <string>
#include <string_view>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/status.h"

namespace aicloud::engine {

inline Status FieldError(std::string_view field, std::string_view what) {
  return InvalidArgumentError(fmt::format("{}: {}", field, what));
}

inline std::string SubField(std::string_view field, std::string_view key) {
  return field.empty() ? std::string(key) : fmt::format("{}.{}", field, key);
}

inline std::string IndexField(std::string_view field, size_t i) {
  return fmt::format("{}[{}]", field, i);
}

// Prefixes a status message with the file it came from, keeping the code.
inline Status WithOrigin(const Status& s, std::string_view origin) {
  if (s.ok()) return s;
  return Status(s.code(), fmt::format("{}: {}", origin, s.message()));
}

// Parses JSON text; INVALID_ARGUMENT naming origin and the parser's position otherwise.
inline StatusOr<nlohmann::json> ParseJsonText(std::string_view text, std::string_view origin) {
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    return InvalidArgumentError(fmt::format("{}: invalid JSON: {}", origin, e.what()));
  }
}

// The member, or nullptr when absent or JSON null.
inline const nlohmann::json* OptionalMember(const nlohmann::json& object, std::string_view key) {
  if (!object.is_object()) return nullptr;
  auto it = object.find(key);
  if (it == object.end() || it->is_null()) return nullptr;
  return &*it;
}

inline StatusOr<const nlohmann::json*> RequiredMember(const nlohmann::json& object,
                                                      std::string_view key,
                                                      std::string_view field) {
  const nlohmann::json* v = OptionalMember(object, key);
  if (v == nullptr) return FieldError(SubField(field, key), "missing");
  return v;
}

inline StatusOr<std::string> StringMember(const nlohmann::json& object, std::string_view key,
                                          std::string_view field) {
  StatusOr<const nlohmann::json*> v = RequiredMember(object, key, field);
  if (!v.ok()) return v.status();
  if (!(*v)->is_string()) return FieldError(SubField(field, key), "expected a string");
  return (*v)->get<std::string>();
}

// An optional boolean: `fallback` when absent or null.
inline StatusOr<bool> BoolMember(const nlohmann::json& object, std::string_view key,
                                 std::string_view field, bool fallback) {
  const nlohmann::json* v = OptionalMember(object, key);
  if (v == nullptr) return fallback;
  if (!v->is_boolean()) return FieldError(SubField(field, key), "expected true or false");
  return v->get<bool>();
}

// A token id: an integer in [0, 2^31).
inline StatusOr<int32_t> TokenIdValue(const nlohmann::json& v, std::string_view field) {
  if (v.is_number_unsigned() && v.get<uint64_t>() <= 0x7FFFFFFF) {
    return static_cast<int32_t>(v.get<uint64_t>());
  }
  if (v.is_number_integer() && v.get<int64_t>() >= 0 && v.get<int64_t>() <= 0x7FFFFFFF) {
    return static_cast<int32_t>(v.get<int64_t>());
  }
  return FieldError(field, "expected a token id (an integer from 0 to 2^31-1)");
}

}  // namespace aicloud::engine
