#include "engine/server/tool_calls.h"

#include <nlohmann/json.hpp>
#include <optional>

namespace aicloud::engine {
namespace {

constexpr std::string_view kOpen = "<tool_call>";
constexpr std::string_view kClose = "</tool_call>";
constexpr std::string_view kPythonTag = "<|python_tag|>";
constexpr size_t kIncomplete = std::string_view::npos;
constexpr size_t kError = kIncomplete - 1;

bool IsSpace(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

size_t SkipSpace(std::string_view s, size_t i) {
  while (i < s.size() && IsSpace(s[i])) ++i;
  return i;
}

bool AllSpace(std::string_view s) {
  for (char c : s) {
    if (!IsSpace(c)) return false;
  }
  return true;
}

// The end of the JSON string starting at s[i] == '"' (one past its closing quote), or
// kIncomplete when s ends first.
size_t StringEnd(std::string_view s, size_t i) {
  for (++i; i < s.size(); ++i) {
    if (s[i] == '\\') {
      ++i;
    } else if (s[i] == '"') {
      return i + 1;
    }
  }
  return kIncomplete;
}

// The end of the JSON value starting at s[i] (one past it), kIncomplete when s ends inside it,
// or kError when it cannot be a value. Containers are matched bracket for bracket, strings
// included; their contents are checked by a real parser later (ParseToolCalls).
size_t ValueEnd(std::string_view s, size_t i) {
  if (i >= s.size()) return kIncomplete;
  const char c = s[i];
  if (c == '"') return StringEnd(s, i);
  if (c == '{' || c == '[') {
    std::string stack(1, c == '{' ? '}' : ']');
    for (++i; i < s.size(); ++i) {
      const char x = s[i];
      if (x == '"') {
        const size_t e = StringEnd(s, i);
        if (e == kIncomplete) return kIncomplete;
        i = e - 1;
      } else if (x == '{' || x == '[') {
        stack.push_back(x == '{' ? '}' : ']');
      } else if (x == '}' || x == ']') {
        if (x != stack.back()) return kError;
        stack.pop_back();
        if (stack.empty()) return i + 1;
      }
    }
    return kIncomplete;
  }
  if (c == '-' || (c >= '0' && c <= '9') || c == 't' || c == 'f' || c == 'n') {
    while (i < s.size() && s[i] != ',' && s[i] != '}' && s[i] != ']' && !IsSpace(s[i])) ++i;
    return i == s.size() ? kIncomplete : i;
  }
  return kError;
}

std::optional<std::string> DecodeString(std::string_view raw) {
  nlohmann::json v = nlohmann::json::parse(raw, nullptr, /*allow_exceptions=*/false);
  if (v.is_discarded() || !v.is_string()) return std::nullopt;
  return v.get<std::string>();
}

}  // namespace

namespace {

// What one pass over the text of a call body (from its '{') found so far.
struct BodyScan {
  bool error = false;
  bool complete = false;  // the object is closed; `end` is one past its '}'
  size_t end = 0;
  bool has_name = false;
  std::string name;
  bool args_first = false;   // the arguments came before the name
  bool has_args = false;     // the arguments' value has begun at args_begin
  size_t args_begin = 0;
  size_t args_end = kIncomplete;  // one past the value, or kIncomplete while it goes on
};

// Scans body = `{"name": ..., "arguments": ...}` as far as it goes. Bodies are short and the
// scan restarts at every delta; that costs less than keeping a resumable parser.
void ScanBody(std::string_view s, ToolCallFormat format, BodyScan* r);

}  // namespace

ToolCallStreamParser::ToolCallStreamParser(ToolCallFormat format)
    : format_(format), mode_(format == ToolCallFormat::kHermes ? Mode::kContent : Mode::kUndecided) {}

std::vector<ToolCallStreamParser::Event> ToolCallStreamParser::Push(std::string_view delta) {
  std::vector<Event> out;
  buf_.append(delta);
  Run(false, &out);
  return out;
}

std::vector<ToolCallStreamParser::Event> ToolCallStreamParser::Finish() {
  std::vector<Event> out;
  Run(true, &out);
  if (mode_ == Mode::kBody && !buf_.empty()) malformed_ = true;  // an unfinished call
  buf_.clear();
  return out;
}

void ToolCallStreamParser::EmitContent(std::string_view text, std::vector<Event>* out) {
  if (text.empty()) return;
  if (!out->empty() && out->back().kind == Event::Kind::kContent) {
    out->back().text.append(text);
  } else {
    out->push_back({Event::Kind::kContent, calls_, std::string(text), ""});
  }
}

void ToolCallStreamParser::Run(bool at_end, std::vector<Event>* out) {
  for (;;) {
    switch (mode_) {
      case Mode::kTextOnly:
        EmitContent(buf_, out);
        buf_.clear();
        return;
      case Mode::kUndecided: {
        // Llama-3: a call only when the whole output starts with one.
        const size_t i = SkipSpace(buf_, 0);
        const std::string_view rest = std::string_view(buf_).substr(i);
        if (rest.starts_with(kPythonTag)) {
          buf_.erase(0, i + kPythonTag.size());
          mode_ = Mode::kBody;
        } else if (rest.starts_with("{")) {
          buf_.erase(0, i);
          mode_ = Mode::kBody;
        } else if (!at_end && (rest.empty() || kPythonTag.starts_with(rest))) {
          return;  // not known yet
        } else {
          mode_ = Mode::kTextOnly;
        }
        break;
      }
      case Mode::kContent: {
        const size_t tag = buf_.find(kOpen);
        if (tag != std::string::npos) {
          // Whitespace between text and a call is not content.
          size_t keep = tag;
          while (keep > 0 && IsSpace(buf_[keep - 1])) --keep;
          EmitContent(std::string_view(buf_).substr(0, keep), out);
          buf_.erase(0, tag + kOpen.size());
          mode_ = Mode::kBody;
          started_ = false;
          args_sent_ = 0;
          break;
        }
        // Hold back what could still become the tag, and trailing whitespace (dropped if a call
        // or the end follows).
        size_t hold = 0;
        if (!at_end) {
          for (size_t k = std::min(buf_.size(), kOpen.size() - 1); k > 0; --k) {
            if (kOpen.starts_with(std::string_view(buf_).substr(buf_.size() - k))) {
              hold = k;
              break;
            }
          }
        }
        size_t emit = buf_.size() - hold;
        while (emit > 0 && IsSpace(buf_[emit - 1])) --emit;
        EmitContent(std::string_view(buf_).substr(0, emit), out);
        buf_.erase(0, emit);
        if (at_end) buf_.clear();
        return;
      }
      case Mode::kBody:
        if (!Body(at_end, out)) return;
        break;
      case Mode::kAfterBody: {
        const size_t i = SkipSpace(buf_, 0);
        const std::string_view rest = std::string_view(buf_).substr(i);
        if (format_ == ToolCallFormat::kHermes) {
          if (rest.starts_with(kClose)) {
            buf_.erase(0, i + kClose.size());
            mode_ = Mode::kContent;
          } else if (!at_end && kClose.starts_with(rest)) {
            return;
          } else {
            mode_ = Mode::kContent;  // no closing tag: what follows is text again
          }
        } else {
          if (rest.starts_with(";")) {
            buf_.erase(0, i + 1);
            const size_t j = SkipSpace(buf_, 0);
            buf_.erase(0, j);
            if (buf_.empty() && !at_end) {
              mode_ = Mode::kBody;
              started_ = false;
              args_sent_ = 0;
              return;
            }
            mode_ = Mode::kBody;
            started_ = false;
            args_sent_ = 0;
          } else if (!at_end && rest.empty()) {
            return;
          } else if (at_end && rest.empty()) {
            buf_.clear();
            return;
          } else {
            mode_ = Mode::kTextOnly;
          }
        }
        break;
      }
    }
  }
}

bool ToolCallStreamParser::Body(bool at_end, std::vector<Event>* out) {
  BodyScan scan;
  ScanBody(buf_, format_, &scan);
  auto give_up = [&] {
    malformed_ = true;
    if (started_) {
      // The call was announced: drop what was sent of it, the rest is text.
      const size_t sent = scan.has_args ? scan.args_begin + args_sent_ : 0;
      buf_.erase(0, std::min(sent, buf_.size()));
    } else if (format_ == ToolCallFormat::kHermes) {
      buf_.insert(0, kOpen);
    }
    mode_ = Mode::kTextOnly;
    return true;
  };
  if (scan.error) return give_up();
  if (!started_ && scan.has_name && !scan.args_first) {
    out->push_back({Event::Kind::kCallStart, calls_, "", scan.name});
    started_ = true;
    ++calls_;
  }
  if (started_ && scan.has_args) {
    const size_t avail = (scan.args_end == kIncomplete ? buf_.size() : scan.args_end) - scan.args_begin;
    if (avail > args_sent_) {
      out->push_back({Event::Kind::kArguments, calls_ - 1, buf_.substr(scan.args_begin + args_sent_, avail - args_sent_), ""});
      args_sent_ = avail;
    }
  }
  if (!scan.complete) {
    if (at_end) return give_up();
    return false;
  }
  // A call names its function and gives its arguments; a JSON object without them is text
  // (a Llama-3 answer that happens to be {"name": "Bob", ...}).
  if (!scan.has_name || !scan.has_args) return give_up();
  if (!started_) {  // the arguments came first: all of it now
    out->push_back({Event::Kind::kCallStart, calls_, "", scan.name});
    started_ = true;
    ++calls_;
    if (scan.has_args) {
      out->push_back({Event::Kind::kArguments, calls_ - 1, buf_.substr(scan.args_begin, scan.args_end - scan.args_begin), ""});
    }
  }
  buf_.erase(0, scan.end);
  mode_ = Mode::kAfterBody;
  started_ = false;
  args_sent_ = 0;
  return true;
}

namespace {

void ScanBody(std::string_view s, ToolCallFormat format, BodyScan* r) {
  size_t i = SkipSpace(s, 0);
  if (i == s.size()) return;
  if (s[i] != '{') {
    r->error = true;
    return;
  }
  for (++i;;) {
    i = SkipSpace(s, i);
    if (i == s.size()) return;
    if (s[i] == '}') {
      r->complete = true;
      r->end = i + 1;
      return;
    }
    if (s[i] != '"') {
      r->error = true;
      return;
    }
    const size_t key_end = StringEnd(s, i);
    if (key_end == kIncomplete) return;
    const std::optional<std::string> key = DecodeString(s.substr(i, key_end - i));
    i = SkipSpace(s, key_end);
    if (i == s.size()) return;
    if (!key || s[i] != ':') {
      r->error = true;
      return;
    }
    i = SkipSpace(s, i + 1);
    if (i == s.size()) return;
    const bool is_args = *key == "arguments" || *key == "parameters";
    const bool is_name = *key == "name";
    if (is_args) {
      r->has_args = true;
      r->args_begin = i;
      r->args_first = !r->has_name;
    }
    const size_t end = ValueEnd(s, i);
    if (end == kError || (is_name && s[i] != '"')) {
      r->error = true;
      return;
    }
    if (end == kIncomplete) return;
    if (is_args) r->args_end = end;
    if (is_name) {
      const std::optional<std::string> name = DecodeString(s.substr(i, end - i));
      if (!name || name->empty()) {
        r->error = true;
        return;
      }
      r->has_name = true;
      r->name = *name;
    }
    i = SkipSpace(s, end);
    if (i == s.size()) return;
    if (s[i] == ',') {
      ++i;
    } else if (s[i] != '}') {
      r->error = true;
      return;
    }
  }
  (void)format;
}

}  // namespace

ParsedOutput ParseToolCalls(ToolCallFormat format, std::string_view text) {
  ToolCallStreamParser p(format);
  std::vector<ToolCallStreamParser::Event> events = p.Push(text);
  std::vector<ToolCallStreamParser::Event> rest = p.Finish();
  events.insert(events.end(), rest.begin(), rest.end());
  ParsedOutput out;
  if (p.malformed()) {
    out.content = AllSpace(text) ? "" : std::string(text);
    return out;
  }
  for (ToolCallStreamParser::Event& ev : events) {
    switch (ev.kind) {
      case ToolCallStreamParser::Event::Kind::kContent:
        out.content += ev.text;
        break;
      case ToolCallStreamParser::Event::Kind::kCallStart:
        out.calls.push_back({ev.name, ""});
        break;
      case ToolCallStreamParser::Event::Kind::kArguments:
        out.calls.back().arguments += ev.text;
        break;
    }
  }
  // Arguments must be a JSON object; anything else means the text was not a call after all.
  for (const ParsedToolCall& c : out.calls) {
    nlohmann::json args = nlohmann::json::parse(c.arguments, nullptr, /*allow_exceptions=*/false);
    if (args.is_discarded() || !args.is_object()) {
      ParsedOutput plain;
      plain.content = AllSpace(text) ? "" : std::string(text);
      return plain;
    }
  }
  if (AllSpace(out.content)) out.content.clear();
  return out;
}

}  // namespace aicloud::engine
