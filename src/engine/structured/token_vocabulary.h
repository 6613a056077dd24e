// TokenVocabulary: a model's tokens as byte strings in a trie, built once per model and shared
// by every TokenGrammar on that model.
//
//   std::shared_ptr<const TokenVocabulary> vocab =
//       TokenVocabulary::Build(tokenizer, config.vocab_size, {*tokenizer.eos_id(), eot_id});
//
// Which tokens are text: every id below both the tokenizer's and the model's vocabulary size
// that is not special and has bytes. Special added tokens (<|im_end|>, <|eot_id|>) are never
// grammar text; non-special added tokens (Qwen2.5's <tool_call>) are, with their content
// bytes. The `eos_ids` end a sequence: they are never text, and a grammar allows them only in
// an accepting state. Ids at or above the tokenizer's size (a model vocabulary padded past the
// tokenizer's) are never allowed.
//
// The trie is a flat array in depth-first order: node i's subtree is [i, end(i)), so a mask walk
// skips a whole subtree in one step when the automaton refuses its first byte.
//
// Thread-safety: immutable after Build; share it freely.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "engine/tokenizer/tokenizer.h"

namespace aicloud::engine::structured {

class TokenVocabulary {
 public:
  static std::shared_ptr<const TokenVocabulary> Build(const Tokenizer& tok,
                                                      int32_t model_vocab_size,
                                                      std::vector<int32_t> eos_ids);
  // From raw token bytes (index = id; "" = not text), for tests and tools.
  static std::shared_ptr<const TokenVocabulary> FromBytes(std::vector<std::string> token_bytes,
                                                          int32_t model_vocab_size,
                                                          std::vector<int32_t> eos_ids);

  // The model's vocabulary size: masks and logits rows have this many entries.
  int32_t size() const { return size_; }
  const std::vector<int32_t>& eos_ids() const { return eos_ids_; }
  bool IsEos(int32_t t) const;
  // The bytes a text token stands for; "" for ids that are never grammar text.
  std::string_view TokenBytes(int32_t t) const {
    return t >= 0 && static_cast<size_t>(t) < bytes_.size() ? std::string_view(bytes_[t])
                                                            : std::string_view();
  }
  // Whether each of the 256 single bytes is a text token. The room-to-close rule of
  // GrammarMatcher counts on it (byte-level BPE vocabularies have it).
  bool has_all_bytes() const { return has_all_bytes_; }
  int32_t text_tokens() const { return static_cast<int32_t>(ids_.size()); }

  // The trie, for mask walks. Node 0 is the root (depth 0, no byte).
  int32_t trie_nodes() const { return static_cast<int32_t>(byte_.size()); }
  int32_t max_depth() const { return max_depth_; }
  const uint8_t* node_byte() const { return byte_.data(); }
  const uint16_t* node_depth() const { return depth_.data(); }
  const int32_t* node_end() const { return end_.data(); }
  // Tokens ending at node i: ids()[token_begin()[i] .. token_begin()[i + 1]).
  const int32_t* token_begin() const { return token_begin_.data(); }
  const int32_t* ids() const { return ids_.data(); }

 private:
  TokenVocabulary() = default;

  int32_t size_ = 0;
  std::vector<int32_t> eos_ids_;
  std::vector<std::string> bytes_;
  bool has_all_bytes_ = false;
  int32_t max_depth_ = 0;
  std::vector<uint8_t> byte_;
  std::vector<uint16_t> depth_;
  std::vector<int32_t> end_;
  std::vector<int32_t> token_begin_;
  std::vector<int32_t> ids_;
};

}  // namespace aicloud::engine::structured
