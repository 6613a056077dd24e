// Pre-tokenizers: cut normalized text into the pieces ("words") that BPE encodes one by one.
//
// These are the steps of a tokenizer.json "pre_tokenizer" that byte-level BPE files use:
// - Split: a regex (PCRE2) or literal pattern, with Hugging Face's delimiter behaviours
//   (Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous) and `invert`. Llama-3,
//   Qwen2 and SmolLM2 files put their whole word pattern here.
// - ByteLevel: optionally prepends a space to each piece (add_prefix_space) and, with
//   use_regex, splits with GPT-2's built-in pattern. Its byte-to-character mapping needs no work
//   here: the BPE model runs on raw bytes (see byte_level.h).
// - Sequence: the steps above in order.
//
// Pieces never cross a byte that is not part of valid UTF-8: regexes run on the valid runs and
// such bytes fall into the unmatched gaps (see utf8.h for why they are kept).
//
// Thread-safe: pre-tokenizers are immutable after parsing; state lives in PreTokenized.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/status.h"
#include "engine/tokenizer/regex.h"

namespace aicloud::engine {

struct TextSpan {
  uint32_t begin;
  uint32_t end;
};

// One pre-tokenization in progress. Steps may append to `buffer` (a prefix space makes a new
// copy of a piece) but never change bytes already there, so spans stay valid.
struct PreTokenized {
  std::string buffer;
  std::vector<TextSpan> spans;  // the current pieces, in text order, never empty
  // Scratch reused between steps and calls.
  std::vector<TextSpan> next;
  std::vector<Regex::Match> matches;

  // Starts over with `text` as the only piece (none when text is empty).
  void Reset(std::string_view text);
  std::string_view Piece(const TextSpan& s) const {
    return std::string_view(buffer).substr(s.begin, s.end - s.begin);
  }
};

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  virtual void Apply(PreTokenized* p) const = 0;
};

// What parsing found besides the steps.
struct PreTokenizerInfo {
  bool byte_level = false;  // a ByteLevel step is present
};

// Parses the value of a tokenizer.json "pre_tokenizer" field; `field` is its path for error
// messages ("pre_tokenizer", "pre_tokenizer.pretokenizers[1]"). A null value or one whose steps
// do nothing gives nullptr. UNIMPLEMENTED for types other than Split, ByteLevel and Sequence.
StatusOr<std::unique_ptr<PreTokenizer>> ParsePreTokenizer(const nlohmann::json& value,
                                                          const std::string& field,
                                                          PreTokenizerInfo* info);

// GPT-2's word pattern, which a ByteLevel step with use_regex applies.
inline constexpr char kGpt2Pattern[] =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

}  // namespace aicloud::engine
