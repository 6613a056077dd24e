#include "store/label_selector.h"

#include <algorithm>
#include <cctype>

namespace aicloud::store {
namespace {

bool IsAlnum(char c) { return std::isalnum(static_cast<unsigned char>(c)) != 0; }

// The "name" rule shared by label values and the name part of keys: [A-Za-z0-9-_.], starting
// and ending with an alphanumeric, at most 63 characters.
std::string NameProblem(std::string_view s, std::string_view what) {
  if (s.size() > 63) return std::string(what) + " must be at most 63 characters";
  if (!IsAlnum(s.front()) || !IsAlnum(s.back())) {
    return std::string(what) + " must start and end with a letter or digit";
  }
  for (char c : s) {
    if (!IsAlnum(c) && c != '-' && c != '_' && c != '.') {
      return std::string(what) + " has invalid character '" + c + "' (allowed: A-Z a-z 0-9 - _ .)";
    }
  }
  return "";
}

std::string DnsSubdomainProblem(std::string_view s) {
  if (s.empty()) return "key prefix must not be empty";
  if (s.size() > 253) return "key prefix must be at most 253 characters";
  for (char c : s) {
    if (!(std::islower(static_cast<unsigned char>(c)) ||
          std::isdigit(static_cast<unsigned char>(c)) || c == '-' || c == '.')) {
      return std::string("key prefix has invalid character '") + c + "' (allowed: a-z 0-9 - .)";
    }
  }
  if (!IsAlnum(s.front()) || !IsAlnum(s.back())) {
    return "key prefix must start and end with a letter or digit";
  }
  return "";
}

// A cursor over the selector text; every error names the text and the position.
class Parser {
 public:
  explicit Parser(std::string_view text) : text_(text) {}

  StatusOr<std::vector<LabelSelector::Requirement>> ParseAll() {
    std::vector<LabelSelector::Requirement> out;
    SkipSpace();
    if (AtEnd()) return out;  // empty selector
    while (true) {
      LabelSelector::Requirement req;
      AICLOUD_RETURN_IF_ERROR(ParseRequirement(req));
      out.push_back(std::move(req));
      SkipSpace();
      if (AtEnd()) break;
      if (text_[pos_] != ',') return Error("expected ',' between requirements");
      ++pos_;
    }
    return out;
  }

 private:
  Status ParseRequirement(LabelSelector::Requirement& req) {
    SkipSpace();
    if (AtEnd() || text_[pos_] == ',') return Error("empty requirement");
    if (text_[pos_] == '!') {
      ++pos_;
      SkipSpace();
      AICLOUD_RETURN_IF_ERROR(ParseKey(req.key));
      req.op = LabelSelector::Op::kNotExists;
      return OkStatus();
    }
    AICLOUD_RETURN_IF_ERROR(ParseKey(req.key));
    SkipSpace();
    if (AtEnd() || text_[pos_] == ',') {
      req.op = LabelSelector::Op::kExists;
      return OkStatus();
    }
    if (Consume("==") || Consume("=")) {
      req.op = LabelSelector::Op::kEquals;
      return ParseValue(req.values);
    }
    if (Consume("!=")) {
      req.op = LabelSelector::Op::kNotEquals;
      return ParseValue(req.values);
    }
    std::string_view word = PeekWord();
    if (word == "in" || word == "notin") {
      pos_ += word.size();
      req.op = word == "in" ? LabelSelector::Op::kIn : LabelSelector::Op::kNotIn;
      return ParseValueSet(req.values);
    }
    return Error("expected one of '=', '==', '!=', 'in', 'notin', ',' after key \"" + req.key +
                 "\"");
  }

  Status ParseKey(std::string& key) {
    size_t start = pos_;
    while (!AtEnd() && IsTokenChar(text_[pos_])) ++pos_;
    key = std::string(text_.substr(start, pos_ - start));
    if (key.empty()) return Error("expected a label key");
    std::string problem = LabelKeyProblem(key);
    if (!problem.empty()) return ErrorAt(start, "key \"" + key + "\": " + problem);
    return OkStatus();
  }

  Status ParseValue(std::vector<std::string>& values) {
    SkipSpace();
    size_t start = pos_;
    while (!AtEnd() && IsTokenChar(text_[pos_])) ++pos_;
    std::string value(text_.substr(start, pos_ - start));
    std::string problem = LabelValueProblem(value);
    if (!problem.empty()) return ErrorAt(start, "value \"" + value + "\": " + problem);
    values.push_back(std::move(value));
    return OkStatus();
  }

  Status ParseValueSet(std::vector<std::string>& values) {
    SkipSpace();
    if (!Consume("(")) return Error("expected '(' after in/notin");
    while (true) {
      AICLOUD_RETURN_IF_ERROR(ParseValue(values));
      SkipSpace();
      if (Consume(")")) break;
      if (!Consume(",")) return Error("expected ',' or ')' in value set");
    }
    return OkStatus();
  }

  // Characters that may appear in keys and values; anything else ends the token.
  static bool IsTokenChar(char c) {
    return IsAlnum(c) || c == '-' || c == '_' || c == '.' || c == '/';
  }
  std::string_view PeekWord() const {
    size_t end = pos_;
    while (end < text_.size() && std::isalpha(static_cast<unsigned char>(text_[end]))) ++end;
    return text_.substr(pos_, end - pos_);
  }
  bool Consume(std::string_view s) {
    if (text_.substr(pos_, s.size()) != s) return false;
    pos_ += s.size();
    return true;
  }
  void SkipSpace() {
    while (!AtEnd() && std::isspace(static_cast<unsigned char>(text_[pos_]))) ++pos_;
  }
  bool AtEnd() const { return pos_ >= text_.size(); }
  Status Error(const std::string& problem) const { return ErrorAt(pos_, problem); }
  Status ErrorAt(size_t pos, const std::string& problem) const {
    return InvalidArgumentError("label selector \"" + std::string(text_) + "\": at position " +
                                std::to_string(pos) + ": " + problem);
  }

  std::string_view text_;
  size_t pos_ = 0;
};

bool ValueIn(const std::vector<std::string>& values, const std::string& v) {
  return std::find(values.begin(), values.end(), v) != values.end();
}

}  // namespace

std::string LabelKeyProblem(std::string_view key) {
  if (key.empty()) return "key must not be empty";
  size_t slash = key.find('/');
  if (slash != std::string_view::npos) {
    std::string problem = DnsSubdomainProblem(key.substr(0, slash));
    if (!problem.empty()) return problem;
    key = key.substr(slash + 1);
    if (key.empty()) return "key name after '/' must not be empty";
  }
  return NameProblem(key, "key name");
}

std::string LabelValueProblem(std::string_view value) {
  if (value.empty()) return "";
  return NameProblem(value, "value");
}

StatusOr<LabelSelector> LabelSelector::Parse(std::string_view text) {
  StatusOr<std::vector<Requirement>> reqs = Parser(text).ParseAll();
  if (!reqs.ok()) return reqs.status();
  LabelSelector sel;
  sel.requirements_ = std::move(*reqs);
  return sel;
}

bool LabelSelector::Matches(const std::map<std::string, std::string>& labels) const {
  for (const Requirement& r : requirements_) {
    auto it = labels.find(r.key);
    bool present = it != labels.end();
    bool ok = false;
    switch (r.op) {
      case Op::kEquals: ok = present && it->second == r.values[0]; break;
      case Op::kNotEquals: ok = !present || it->second != r.values[0]; break;
      case Op::kExists: ok = present; break;
      case Op::kNotExists: ok = !present; break;
      case Op::kIn: ok = present && ValueIn(r.values, it->second); break;
      case Op::kNotIn: ok = !present || !ValueIn(r.values, it->second); break;
    }
    if (!ok) return false;
  }
  return true;
}

bool LabelSelector::Matches(const nlohmann::json& labels) const {
  if (requirements_.empty()) return true;
  std::map<std::string, std::string> flat;
  if (labels.is_object()) {
    for (const auto& [k, v] : labels.items()) {
      // A non-string value still counts as "present" but equals no selector value.
      flat[k] = v.is_string() ? v.get<std::string>() : std::string("\x01non-string");
    }
  }
  return Matches(flat);
}

std::string LabelSelector::ToString() const {
  std::string out;
  for (const Requirement& r : requirements_) {
    if (!out.empty()) out += ',';
    auto set = [&r] {
      std::string s = " (";
      for (size_t i = 0; i < r.values.size(); ++i) s += (i ? "," : "") + r.values[i];
      return s + ")";
    };
    switch (r.op) {
      case Op::kEquals: out += r.key + "=" + r.values[0]; break;
      case Op::kNotEquals: out += r.key + "!=" + r.values[0]; break;
      case Op::kExists: out += r.key; break;
      case Op::kNotExists: out += "!" + r.key; break;
      case Op::kIn: out += r.key + " in" + set(); break;
      case Op::kNotIn: out += r.key + " notin" + set(); break;
    }
  }
  return out;
}

}  // namespace aicloud::store
