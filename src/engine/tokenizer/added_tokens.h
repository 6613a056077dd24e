// Added tokens: the entries of tokenizer.json's "added_tokens" (special tokens such as
// <|begin_of_text|> or <|im_start|>, and ordinary ones such as Qwen's <tool_call>), which are cut
// out of the text before any normalization or BPE and map straight to their ids.
//
//   AddedTokenMatcher m;
//   m.Add({.id = 151644, .content = "<|im_start|>", .special = true});
//   std::vector<AddedTokenMatcher::Piece> pieces;
//   m.Split("<|im_start|>user", &pieces);   // {0,12,151644} {12,16,-1}
//
// Matching follows Hugging Face's AddedVocabulary: leftmost-longest, non-overlapping matches;
// a `single_word` token only matches when no word character touches it; `lstrip` / `rstrip`
// make a match absorb the whitespace before / after it.
//
// Thread-safety: build on one thread, then Split may run concurrently.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace aicloud::engine {

struct AddedToken {
  int32_t id = 0;
  std::string content;
  bool special = false;
  bool lstrip = false;
  bool rstrip = false;
  bool normalized = false;  // matched against normalized text rather than the raw input
  bool single_word = false;
};

class AddedTokenMatcher {
 public:
  struct Piece {
    uint32_t begin;
    uint32_t end;
    int32_t id;  // -1: ordinary text
  };

  // Empty contents are ignored; a content added twice keeps the first token.
  void Add(const AddedToken& token);
  bool empty() const { return tokens_.empty(); }

  // Appends pieces covering `text` in order: token pieces and the non-empty text between them.
  // Offsets are relative to text (< 4 GiB).
  void Split(std::string_view text, std::vector<Piece>* out) const;

 private:
  struct Node {
    std::vector<std::pair<unsigned char, int32_t>> children;
    int32_t token = -1;  // index into tokens_ when a token ends here
  };
  struct Found {
    size_t end = 0;
    int32_t token = -1;
  };
  Found LongestAt(std::string_view text, size_t at) const;

  std::vector<AddedToken> tokens_;
  std::vector<Node> nodes_ = std::vector<Node>(1);  // nodes_[0] is the root
  bool first_byte_[256] = {};
};

}  // namespace aicloud::engine
