#include "engine/tokenizer/pre_tokenizer.h"

#include <string_view>
#include <utility>

#include "engine/tokenizer/json_fields.h"
#include "engine/tokenizer/utf8.h"

namespace aicloud::engine {
namespace {

using nlohmann::json;

// Hugging Face's SplitDelimiterBehavior.
enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

struct Mark {
  TextSpan span;
  bool is_match;
};

// Split: matches of a pattern become delimiters, handled per `behavior`.
class SplitPreTokenizer : public PreTokenizer {
 public:
  SplitPreTokenizer(std::unique_ptr<Regex> regex, std::string literal, SplitBehavior behavior,
                    bool invert)
      : regex_(std::move(regex)),
        literal_(std::move(literal)),
        behavior_(behavior),
        invert_(invert) {}

  void Apply(PreTokenized* p) const override {
    p->next.clear();
    std::vector<Mark> marks;
    for (const TextSpan& span : p->spans) {
      FindMatches(p, span);
      if (behavior_ == SplitBehavior::kIsolated) {
        // Every match and every gap is a piece; invert changes nothing here.
        uint32_t prev = span.begin;
        for (const Regex::Match& m : p->matches) {
          if (m.begin > prev) p->next.push_back({prev, m.begin});
          p->next.push_back({m.begin, m.end});
          prev = m.end;
        }
        if (span.end > prev) p->next.push_back({prev, span.end});
        continue;
      }
      marks.clear();
      uint32_t prev = span.begin;
      for (const Regex::Match& m : p->matches) {
        if (m.begin > prev) marks.push_back({{prev, m.begin}, invert_});
        marks.push_back({{m.begin, m.end}, !invert_});
        prev = m.end;
      }
      if (span.end > prev) marks.push_back({{prev, span.end}, invert_});
      ApplyBehavior(marks, &p->next);
    }
    std::swap(p->spans, p->next);
  }

 private:
  // Fills p->matches with absolute offsets of the matches inside span.
  void FindMatches(PreTokenized* p, const TextSpan& span) const {
    p->matches.clear();
    const std::string_view text = p->Piece(span);
    if (!regex_) {
      for (size_t at = text.find(literal_); at != std::string_view::npos;
           at = text.find(literal_, at + literal_.size())) {
        p->matches.push_back({static_cast<uint32_t>(span.begin + at),
                              static_cast<uint32_t>(span.begin + at + literal_.size())});
      }
      return;
    }
    // The regex sees only valid UTF-8: run it on each valid stretch.
    size_t i = 0;
    while (i < text.size()) {
      const size_t valid = Utf8ValidPrefix(text, i);
      if (valid > 0) {
        const size_t first = p->matches.size();
        regex_->FindAll(text.substr(i, valid), &p->matches);
        for (size_t k = first; k < p->matches.size(); ++k) {
          p->matches[k].begin += static_cast<uint32_t>(span.begin + i);
          p->matches[k].end += static_cast<uint32_t>(span.begin + i);
        }
      }
      i += valid + 1;  // skip the byte that stopped the valid run
    }
  }

  // The behaviours other than Isolated, as Hugging Face's NormalizedString::split defines them.
  void ApplyBehavior(const std::vector<Mark>& marks, std::vector<TextSpan>* out) const {
    switch (behavior_) {
      case SplitBehavior::kIsolated:
        for (const Mark& m : marks) out->push_back(m.span);
        return;
      case SplitBehavior::kRemoved:
        for (const Mark& m : marks) {
          if (!m.is_match) out->push_back(m.span);
        }
        return;
      case SplitBehavior::kContiguous: {
        // Runs of marks of the same kind become one piece.
        const size_t first = out->size();
        bool previous_match = false;
        for (const Mark& m : marks) {
          if (out->size() > first && m.is_match == previous_match) {
            out->back().end = m.span.end;
          } else {
            out->push_back(m.span);
          }
          previous_match = m.is_match;
        }
        return;
      }
      case SplitBehavior::kMergedWithPrevious: {
        const size_t first = out->size();
        bool previous_match = false;
        for (const Mark& m : marks) {
          if (m.is_match && !previous_match && out->size() > first) {
            out->back().end = m.span.end;
          } else {
            out->push_back(m.span);
          }
          previous_match = m.is_match;
        }
        return;
      }
      case SplitBehavior::kMergedWithNext: {
        // The mirror image: walk backwards, merging a match into the piece after it.
        std::vector<TextSpan> reversed;
        bool previous_match = false;
        for (auto it = marks.rbegin(); it != marks.rend(); ++it) {
          if (it->is_match && !previous_match && !reversed.empty()) {
            reversed.back().begin = it->span.begin;
          } else {
            reversed.push_back(it->span);
          }
          previous_match = it->is_match;
        }
        out->insert(out->end(), reversed.rbegin(), reversed.rend());
        return;
      }
    }
  }

  std::unique_ptr<Regex> regex_;  // null: split on literal_
  std::string literal_;
  SplitBehavior behavior_;
  bool invert_;
};

// ByteLevel's own work: a space before each piece that lacks one, then GPT-2's split.
class ByteLevelPreTokenizer : public PreTokenizer {
 public:
  ByteLevelPreTokenizer(bool add_prefix_space, std::unique_ptr<PreTokenizer> split)
      : add_prefix_space_(add_prefix_space), split_(std::move(split)) {}

  void Apply(PreTokenized* p) const override {
    if (add_prefix_space_) {
      for (TextSpan& s : p->spans) {
        if (p->buffer[s.begin] == ' ') continue;
        const auto begin = static_cast<uint32_t>(p->buffer.size());
        const size_t length = s.end - s.begin;
        p->buffer.reserve(p->buffer.size() + 1 + length);  // the copy below reads the buffer
        p->buffer.push_back(' ');
        p->buffer.append(p->buffer.data() + s.begin, length);
        s = {begin, static_cast<uint32_t>(p->buffer.size())};
      }
    }
    if (split_) split_->Apply(p);
  }

 private:
  bool add_prefix_space_;
  std::unique_ptr<PreTokenizer> split_;
};

class SequencePreTokenizer : public PreTokenizer {
 public:
  explicit SequencePreTokenizer(std::vector<std::unique_ptr<PreTokenizer>> steps)
      : steps_(std::move(steps)) {}
  void Apply(PreTokenized* p) const override {
    for (const auto& step : steps_) step->Apply(p);
  }

 private:
  std::vector<std::unique_ptr<PreTokenizer>> steps_;
};

StatusOr<SplitBehavior> ParseBehavior(const std::string& name, const std::string& field) {
  if (name == "Removed") return SplitBehavior::kRemoved;
  if (name == "Isolated") return SplitBehavior::kIsolated;
  if (name == "MergedWithPrevious") return SplitBehavior::kMergedWithPrevious;
  if (name == "MergedWithNext") return SplitBehavior::kMergedWithNext;
  if (name == "Contiguous") return SplitBehavior::kContiguous;
  return FieldError(field, fmt::format("unknown behavior \"{}\" (expected Removed, Isolated, "
                                       "MergedWithPrevious, MergedWithNext or Contiguous)",
                                       name));
}

StatusOr<std::unique_ptr<PreTokenizer>> ParseSplit(const json& value, const std::string& field) {
  StatusOr<const json*> pattern = RequiredMember(value, "pattern", field);
  if (!pattern.ok()) return pattern.status();
  const std::string pattern_field = SubField(field, "pattern");
  std::unique_ptr<Regex> regex;
  std::string literal;
  if (const json* re = OptionalMember(**pattern, "Regex")) {
    if (!re->is_string()) return FieldError(SubField(pattern_field, "Regex"), "expected a string");
    StatusOr<std::unique_ptr<Regex>> compiled = Regex::Compile(re->get<std::string>());
    if (!compiled.ok()) {
      return FieldError(SubField(pattern_field, "Regex"), compiled.status().message());
    }
    regex = std::move(*compiled);
  } else if (const json* s = OptionalMember(**pattern, "String")) {
    if (!s->is_string() || s->get<std::string>().empty()) {
      return FieldError(SubField(pattern_field, "String"), "expected a non-empty string");
    }
    literal = s->get<std::string>();
  } else {
    return FieldError(pattern_field, "expected {\"Regex\": ...} or {\"String\": ...}");
  }
  StatusOr<std::string> behavior_name = StringMember(value, "behavior", field);
  if (!behavior_name.ok()) return behavior_name.status();
  StatusOr<SplitBehavior> behavior = ParseBehavior(*behavior_name, SubField(field, "behavior"));
  if (!behavior.ok()) return behavior.status();
  StatusOr<bool> invert = BoolMember(value, "invert", field, false);
  if (!invert.ok()) return invert.status();
  return std::unique_ptr<PreTokenizer>(
      new SplitPreTokenizer(std::move(regex), std::move(literal), *behavior, *invert));
}

StatusOr<std::unique_ptr<PreTokenizer>> ParseByteLevel(const json& value,
                                                       const std::string& field) {
  StatusOr<bool> add_prefix_space = BoolMember(value, "add_prefix_space", field, true);
  if (!add_prefix_space.ok()) return add_prefix_space.status();
  StatusOr<bool> use_regex = BoolMember(value, "use_regex", field, true);
  if (!use_regex.ok()) return use_regex.status();
  std::unique_ptr<PreTokenizer> split;
  if (*use_regex) {
    StatusOr<std::unique_ptr<Regex>> regex = Regex::Compile(kGpt2Pattern);
    if (!regex.ok()) return regex.status();
    split = std::make_unique<SplitPreTokenizer>(std::move(*regex), "", SplitBehavior::kIsolated,
                                                false);
  }
  if (!*add_prefix_space && !split) return std::unique_ptr<PreTokenizer>();  // nothing to do
  return std::unique_ptr<PreTokenizer>(
      new ByteLevelPreTokenizer(*add_prefix_space, std::move(split)));
}

}  // namespace

void PreTokenized::Reset(std::string_view text) {
  buffer.assign(text);
  spans.clear();
  if (!text.empty()) spans.push_back({0, static_cast<uint32_t>(text.size())});
}

StatusOr<std::unique_ptr<PreTokenizer>> ParsePreTokenizer(const json& value,
                                                          const std::string& field,
                                                          PreTokenizerInfo* info) {
  if (value.is_null()) return std::unique_ptr<PreTokenizer>();
  if (!value.is_object()) return FieldError(field, "expected an object or null");
  StatusOr<std::string> type = StringMember(value, "type", field);
  if (!type.ok()) return type.status();
  if (*type == "Split") return ParseSplit(value, field);
  if (*type == "ByteLevel") {
    info->byte_level = true;
    return ParseByteLevel(value, field);
  }
  if (*type == "Sequence") {
    StatusOr<const json*> list = RequiredMember(value, "pretokenizers", field);
    if (!list.ok()) return list.status();
    const std::string list_field = SubField(field, "pretokenizers");
    if (!(*list)->is_array()) return FieldError(list_field, "expected an array");
    std::vector<std::unique_ptr<PreTokenizer>> steps;
    for (size_t i = 0; i < (*list)->size(); ++i) {
      StatusOr<std::unique_ptr<PreTokenizer>> step =
          ParsePreTokenizer((**list)[i], IndexField(list_field, i), info);
      if (!step.ok()) return step.status();
      if (*step) steps.push_back(std::move(*step));
    }
    if (steps.empty()) return std::unique_ptr<PreTokenizer>();
    if (steps.size() == 1) return std::move(steps[0]);
    return std::unique_ptr<PreTokenizer>(new SequencePreTokenizer(std::move(steps)));
  }
  return UnimplementedError(fmt::format(
      "{}: pre-tokenizer type \"{}\" is not supported (supported: ByteLevel, Split, Sequence)",
      SubField(field, "type"), *type));
}

}  // namespace aicloud::engine
