// JSON values written straight into a string, as nlohmann's dump() writes them, for the texts the
// gateway writes on every request (usage records, rewritten bodies) without building a document.
//
//   std::string line = "{\"model\":";
//   AppendJsonString(&line, model);  // "\"llama\"", escaped as dump() escapes
//   line += ",\"cost\":";
//   AppendJsonDouble(&line, 0.0001);  // "0.0001"; 100000.0, 1e-05, 1e+15; null if not finite
#pragma once

#include <string>
#include <string_view>

namespace aicloud::gateway {

// A JSON string literal of `s`: quotes, backslashes and control characters escaped as dump()
// does (\", \\, \b, \f, \n, \r, \t, \u00XX), other UTF-8 as it is. Bytes that are not valid
// UTF-8 become U+FFFD, as dump() with error_handler_t::replace makes them, so the output is
// always valid JSON.
void AppendJsonString(std::string* out, std::string_view s);

// A JSON number for `v` in dump()'s layout: the shortest digits that read back to `v` (dump()'s
// Grisu2 now and then writes a longer form of the same double); fixed notation when the value's
// scientific exponent is -4..14 (a whole number gets ".0"), otherwise d.ddde±XX with at least
// two exponent digits (1e+15, 1e-05). NaN and infinities are written as null.
void AppendJsonDouble(std::string* out, double v);

}  // namespace aicloud::gateway
