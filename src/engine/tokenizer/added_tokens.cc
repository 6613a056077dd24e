#include "engine/tokenizer/added_tokens.h"

#include <memory>

#include "engine/tokenizer/regex.h"
#include "engine/tokenizer/utf8.h"

namespace aicloud::engine {
namespace {

// The code point that ends just before `end`, with its start; false when the bytes there are
// not a valid UTF-8 sequence.
bool CharBefore(std::string_view text, size_t end, char32_t* cp, size_t* start) {
  if (end == 0) return false;
  size_t j = end - 1;
  while (j > 0 && end - j < 4 && (static_cast<unsigned char>(text[j]) & 0xC0) == 0x80) --j;
  if (Utf8DecodeAt(text, j, cp) != end - j) return false;
  *start = j;
  return true;
}

// Rust's char::is_alphanumeric() or '_': what Hugging Face's single_word check calls a word
// character.
bool IsWordChar(char32_t cp) {
  if (cp < 0x80) {
    return (cp >= '0' && cp <= '9') || (cp >= 'A' && cp <= 'Z') || (cp >= 'a' && cp <= 'z') ||
           cp == '_';
  }
  static const std::unique_ptr<Regex> word = [] {
    StatusOr<std::unique_ptr<Regex>> re = Regex::Compile(R"([\p{Alphabetic}\p{N}])");
    return re.ok() ? std::move(*re) : nullptr;
  }();
  if (!word) return false;
  std::string s;
  AppendUtf8(cp, &s);
  return word->FullMatch(s);
}

}  // namespace

void AddedTokenMatcher::Add(const AddedToken& token) {
  if (token.content.empty()) return;
  int32_t node = 0;
  for (char c : token.content) {
    const auto b = static_cast<unsigned char>(c);
    int32_t child = -1;
    for (const auto& [byte, index] : nodes_[node].children) {
      if (byte == b) child = index;
    }
    if (child < 0) {
      child = static_cast<int32_t>(nodes_.size());
      nodes_[node].children.emplace_back(b, child);
      nodes_.emplace_back();
    }
    node = child;
  }
  if (nodes_[node].token >= 0) return;
  nodes_[node].token = static_cast<int32_t>(tokens_.size());
  tokens_.push_back(token);
  first_byte_[static_cast<unsigned char>(token.content[0])] = true;
}

AddedTokenMatcher::Found AddedTokenMatcher::LongestAt(std::string_view text, size_t at) const {
  Found best;
  int32_t node = 0;
  for (size_t j = at; j < text.size(); ++j) {
    const auto b = static_cast<unsigned char>(text[j]);
    int32_t next = -1;
    for (const auto& [byte, index] : nodes_[node].children) {
      if (byte == b) {
        next = index;
        break;
      }
    }
    if (next < 0) break;
    node = next;
    if (nodes_[node].token >= 0) best = {j + 1, nodes_[node].token};
  }
  return best;
}

void AddedTokenMatcher::Split(std::string_view text, std::vector<Piece>* out) const {
  size_t emitted = 0;  // text before this is already covered by pieces
  size_t i = 0;
  while (i < text.size()) {
    if (!first_byte_[static_cast<unsigned char>(text[i])]) {
      ++i;
      continue;
    }
    const Found found = LongestAt(text, i);
    if (found.token < 0) {
      ++i;
      continue;
    }
    const AddedToken& token = tokens_[found.token];
    size_t start = i;
    size_t stop = found.end;
    char32_t cp;
    if (token.single_word) {
      size_t before;
      const bool word_before = CharBefore(text, start, &cp, &before) && IsWordChar(cp);
      const bool word_after = stop < text.size() && Utf8DecodeAt(text, stop, &cp) > 0 &&
                              IsWordChar(cp);
      if (word_before || word_after) {
        i = stop;  // the match is consumed but rejected, as in Hugging Face's scan
        continue;
      }
    }
    if (token.lstrip) {
      size_t before;
      while (CharBefore(text, start, &cp, &before) && before >= emitted &&
             IsUnicodeWhiteSpace(cp)) {
        start = before;
      }
    }
    if (token.rstrip) {
      while (stop < text.size()) {
        const size_t n = Utf8DecodeAt(text, stop, &cp);
        if (n == 0 || !IsUnicodeWhiteSpace(cp)) break;
        stop += n;
      }
    }
    if (start > emitted) {
      out->push_back({static_cast<uint32_t>(emitted), static_cast<uint32_t>(start), -1});
    }
    out->push_back({static_cast<uint32_t>(start), static_cast<uint32_t>(stop), token.id});
    emitted = stop;
    i = stop;
  }
  if (text.size() > emitted) {
    out->push_back({static_cast<uint32_t>(emitted), static_cast<uint32_t>(text.size()), -1});
  }
}

}  // namespace aicloud::engine
