// PyJsonDumps: JSON text exactly as Python's json.dumps(value, ensure_ascii=False, indent=...)
// writes it, which is what Hugging Face chat templates' `tojson` filter produces. Chat
// templates render tool schemas and tool-call arguments with it, so a prompt matches the one
// the model was trained on byte for byte.
//
//   PyJsonDumps(ordered_json::parse(R"({"a":[1,2],"b":"é"})"))   // {"a": [1, 2], "b": "é"}
//   PyJsonDumps(v, 4)   // one member per line, four spaces per level, ": " and ","
//
// Keys keep their order (ordered_json). Strings escape `"`, `\` and control characters
// (\n \r \t \b \f, others below 0x20 as \u00XX); everything else, DEL and non-ASCII included,
// is written as is.
// Integers as integers; floats the shortest way that reads back the same, with ".0" for
// integral values, as Python's repr; NaN and infinities as NaN, Infinity, -Infinity.
//
// Thread-safety: a pure function.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace aicloud::engine {

// indent < 0: one line, separators ", " and ": ".
std::string PyJsonDumps(const nlohmann::ordered_json& value, int indent = -1);

}  // namespace aicloud::engine
