#include "sim/serving_trace.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace aicloud::sim {
namespace {

// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's days_from_civil).
int64_t DaysFromCivil(int64_t y, int m, int d) {
  y -= m <= 2 ? 1 : 0;
  const int64_t era = (y >= 0 ? y : y - 399) / 400;
  const int64_t yoe = y - era * 400;
  const int64_t doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
  const int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + doe - 719468;
}

bool ParseInt(std::string_view s, int64_t* out) {
  if (s.empty()) return false;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
  return ec == std::errc() && p == s.data() + s.size();
}

StatusOr<std::string> ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFoundError(path + ": cannot open file");
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string Stem(const std::string& path) {
  std::string base = path.substr(path.find_last_of('/') + 1);
  return base.substr(0, base.find('.'));
}

}  // namespace

StatusOr<double> ParseTraceTimestamp(std::string_view text) {
  // YYYY-MM-DD HH:MM:SS[.fraction]
  auto bad = [&] {
    return InvalidArgumentError("'" + std::string(text) + "' is not a timestamp like 2023-11-16 18:15:46.68");
  };
  if (text.size() < 19 || text[4] != '-' || text[7] != '-' || (text[10] != ' ' && text[10] != 'T') ||
      text[13] != ':' || text[16] != ':') {
    return bad();
  }
  int64_t y, mo, d, h, mi, s;
  if (!ParseInt(text.substr(0, 4), &y) || !ParseInt(text.substr(5, 2), &mo) ||
      !ParseInt(text.substr(8, 2), &d) || !ParseInt(text.substr(11, 2), &h) ||
      !ParseInt(text.substr(14, 2), &mi) || !ParseInt(text.substr(17, 2), &s)) {
    return bad();
  }
  if (mo < 1 || mo > 12 || d < 1 || d > 31 || h > 23 || mi > 59 || s > 60) return bad();
  double frac = 0;
  if (text.size() > 19) {
    if (text[19] != '.' || text.size() == 20) return bad();
    double scale = 0.1;
    for (char c : text.substr(20)) {
      if (c < '0' || c > '9') return bad();
      frac += (c - '0') * scale;
      scale /= 10;
    }
  }
  return static_cast<double>(DaysFromCivil(y, static_cast<int>(mo), static_cast<int>(d)) * 86400 +
                             h * 3600 + mi * 60 + s) + frac;
}

StatusOr<ServingTrace> ParseAzureLlmTrace(const CsvTable& table) {
  AICLOUD_RETURN_IF_ERROR(table.RequireColumns({"TIMESTAMP", "ContextTokens", "GeneratedTokens"}));
  ServingTrace trace;
  const std::string stem = Stem(table.name());
  const size_t us = stem.rfind('_');
  trace.name = us == std::string::npos ? stem : stem.substr(us + 1);
  double first = 0;
  double last = -1e300;
  for (const CsvRow& row : table.rows()) {
    StatusOr<double> t = ParseTraceTimestamp(row.Get("TIMESTAMP"));
    if (!t.ok()) return row.Error("TIMESTAMP", t.status().message());
    StatusOr<int64_t> ctx = row.GetInt("ContextTokens");
    if (!ctx.ok()) return ctx.status();
    StatusOr<int64_t> gen = row.GetInt("GeneratedTokens");
    if (!gen.ok()) return gen.status();
    if (*ctx < 0 || *ctx > 10'000'000) return row.Error("ContextTokens", "must be 0..10000000");
    if (*gen < 0 || *gen > 10'000'000) return row.Error("GeneratedTokens", "must be 0..10000000");
    if (trace.requests.empty()) first = *t;
    if (*t < last) return row.Error("TIMESTAMP", "goes back in time (rows must be sorted)");
    last = *t;
    trace.requests.push_back({*t - first, static_cast<int>(*ctx), static_cast<int>(*gen), {}});
  }
  if (trace.requests.empty()) return InvalidArgumentError(table.name() + ": no requests");
  return trace;
}

StatusOr<ServingTrace> LoadAzureLlmTrace(const std::string& path) {
  StatusOr<CsvTable> t = CsvTable::ReadFile(path);
  if (!t.ok()) return t.status();
  return ParseAzureLlmTrace(*t);
}

StatusOr<ServingTrace> ParseMooncakeTrace(std::string_view text, const std::string& name) {
  ServingTrace trace;
  trace.name = Stem(name);
  trace.block_tokens = 512;
  int line_no = 0;
  size_t pos = 0;
  auto err = [&](const std::string& what) {
    return InvalidArgumentError(fmt::format("{}:{}: {}", name, line_no, what));
  };
  while (pos < text.size()) {
    size_t nl = text.find('\n', pos);
    std::string_view line = text.substr(pos, nl == std::string_view::npos ? std::string_view::npos : nl - pos);
    pos = nl == std::string_view::npos ? text.size() : nl + 1;
    ++line_no;
    if (line.find_first_not_of(" \t\r") == std::string_view::npos) continue;
    nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded()) return err("not a JSON object");
    if (!j.is_object()) return err("not a JSON object");
    auto number = [&](const char* key, bool integer) -> StatusOr<double> {
      auto it = j.find(key);
      if (it == j.end()) return err(std::string(key) + ": missing");
      if (!it->is_number() || (integer && !it->is_number_integer()) || it->get<double>() < 0) {
        return err(std::string(key) + ": must be a non-negative " + (integer ? "integer" : "number"));
      }
      return it->get<double>();
    };
    StatusOr<double> ts = number("timestamp", false);
    if (!ts.ok()) return ts.status();
    StatusOr<double> in = number("input_length", true);
    if (!in.ok()) return in.status();
    StatusOr<double> out = number("output_length", true);
    if (!out.ok()) return out.status();
    if (*in > 10'000'000 || *out > 10'000'000) return err("token counts must be at most 10000000");
    ServingRequest r;
    r.arrival_s = *ts / 1000;
    r.prompt_tokens = static_cast<int>(*in);
    r.output_tokens = static_cast<int>(*out);
    auto h = j.find("hash_ids");
    if (h != j.end()) {
      if (!h->is_array()) return err("hash_ids: must be a list of non-negative integers");
      for (const nlohmann::json& v : *h) {
        if (!v.is_number_unsigned()) return err("hash_ids: must be a list of non-negative integers");
        r.block_hashes.push_back(v.get<uint64_t>());
      }
    }
    trace.requests.push_back(std::move(r));
  }
  if (trace.requests.empty()) return InvalidArgumentError(name + ": no requests");
  std::stable_sort(trace.requests.begin(), trace.requests.end(),
                   [](const ServingRequest& a, const ServingRequest& b) { return a.arrival_s < b.arrival_s; });
  const double first = trace.requests.front().arrival_s;
  for (ServingRequest& r : trace.requests) r.arrival_s -= first;
  return trace;
}

StatusOr<ServingTrace> LoadMooncakeTrace(const std::string& path) {
  StatusOr<std::string> text = ReadAll(path);
  if (!text.ok()) return text.status();
  return ParseMooncakeTrace(*text, path);
}

}  // namespace aicloud::sim
