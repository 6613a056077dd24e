// Tokenizer: text <-> token ids for the serving engine, read from a Hugging Face tokenizer.json
// with a byte-level BPE model (GPT-2, Llama-3, Qwen2/2.5, SmolLM2 and their relatives).
//
//   StatusOr<TokenizerConfig> config = TokenizerConfig::FromFile(dir + "/tokenizer_config.json");
//   StatusOr<std::unique_ptr<Tokenizer>> tok = Tokenizer::FromFile(dir + "/tokenizer.json", *config);
//   if (!tok.ok()) return tok.status();            // names the file and the field at fault
//   std::vector<int32_t> ids = (*tok)->Encode("Hello world", /*add_special_tokens=*/true);
//   std::string text = (*tok)->Decode(ids, /*skip_special_tokens=*/true);   // "Hello world"
//
// Encoding does what Hugging Face's tokenizers library does with the same file:
//   1. cut out added tokens (added_tokens: <|im_start|>, <|eot_id|>, ...), leftmost-longest;
//   2. normalize the text between them (normalizer: none or NFC);
//   3. pre-tokenize it into words (pre_tokenizer: Split regexes from the file, ByteLevel);
//   4. BPE each word by merge rank (model), with `ignore_merges` where the file sets it;
//   5. with add_special_tokens, wrap the result as the post_processor says (TemplateProcessing
//      adds e.g. a BOS; ByteLevel adds nothing), or as tokenizer_config.json's explicit
//      add_bos_token / add_eos_token say.
// Results are checked against known answers from llama.cpp's test files (GPT-2, Llama-3) and
// transformers.js (Qwen2.5): see tokenizer_test.cc.
//
// Any byte string can be encoded: bytes that are not valid UTF-8 skip normalization and the
// regexes and are encoded by their byte tokens, so Decode(Encode(s)) == s for every s without
// added tokens in it.
//
// Rendered chat prompts already hold their BOS as text: encode them with
// add_special_tokens=false (see chat_template.h). Chat models end a turn with the template's
// end_of_turn() token (<|eot_id|>, <|im_end|>), which may differ from eos_id(): stop on both.
// For streaming output, StreamDecoder (stream_decoder.h) returns whole UTF-8 pieces.
//
// Thread-safety: a Tokenizer is immutable after loading; all const methods may be called
// concurrently from any number of threads.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/status.h"
#include "engine/tokenizer/added_tokens.h"
#include "engine/tokenizer/bpe.h"
#include "engine/tokenizer/pre_tokenizer.h"
#include "engine/tokenizer/tokenizer_config.h"

namespace aicloud::engine {

class Tokenizer {
 public:
  // Loads a tokenizer.json. NOT_FOUND for a missing file; INVALID_ARGUMENT for bad JSON or bad
  // fields; UNIMPLEMENTED for valid files this engine does not handle (not BPE, not byte-level,
  // an unsupported normalizer / pre-tokenizer / post-processor type). Messages name the file
  // and the field.
  static StatusOr<std::unique_ptr<Tokenizer>> FromFile(const std::string& path);
  // With tokenizer_config.json: BOS/EOS come from its bos_token / eos_token (which must then
  // be tokens of the vocabulary), and its explicit add_bos_token / add_eos_token apply.
  static StatusOr<std::unique_ptr<Tokenizer>> FromFile(const std::string& path,
                                                      const TokenizerConfig& config);
  // `origin` names the text in error messages (a path, or e.g. "test").
  static StatusOr<std::unique_ptr<Tokenizer>> FromJson(std::string_view text,
                                                      std::string_view origin);
  static StatusOr<std::unique_ptr<Tokenizer>> FromJson(std::string_view text,
                                                      std::string_view origin,
                                                      const TokenizerConfig& config);

  // Text to ids. add_special_tokens: apply the post-processor (e.g. prepend BOS).
  // parse_special: when false, special added tokens written in the text are encoded as plain
  // text (use it for untrusted content spliced into a prompt); non-special added tokens are
  // still recognised, as in Hugging Face's `split_special_tokens`.
  std::vector<int32_t> Encode(std::string_view text, bool add_special_tokens,
                              bool parse_special = true) const;
  // Appends the ids of `text` to *out, without post-processing.
  void EncodeTo(std::string_view text, bool parse_special, std::vector<int32_t>* out) const;

  // Ids to text: the bytes of each token concatenated; added tokens give their content.
  // skip_special_tokens drops special added tokens. Ids that are no token are skipped.
  // The result is the exact bytes, which may end inside a UTF-8 sequence when `ids` is a
  // prefix of a longer output (Hugging Face would replace those bytes with U+FFFD).
  std::string Decode(std::span<const int32_t> ids, bool skip_special_tokens) const;

  // One more than the largest token id, added tokens included.
  int32_t VocabSize() const { return vocab_size_; }
  // The token as the vocabulary writes it ("Ġworld", "<|eot_id|>"); "" when id is no token.
  std::string_view TokenText(int32_t id) const;
  // The bytes the token stands for (" world", "<|eot_id|>"); "" when id is no token.
  std::string_view TokenBytes(int32_t id) const;
  // The id of a token written as the vocabulary writes it, added tokens included.
  std::optional<int32_t> FindToken(std::string_view text) const;
  bool IsSpecial(int32_t id) const;

  // From tokenizer_config.json when given (absent or null there: none); without a config, the
  // first added token with a usual name: BOS <|begin_of_text|>, <s>, <|startoftext|>, <bos>;
  // EOS <|end_of_text|>, <|endoftext|>, </s>, <eos>.
  std::optional<int32_t> bos_id() const { return bos_id_; }
  std::optional<int32_t> eos_id() const { return eos_id_; }
  // Whether Encode(text, true) starts with the BOS id.
  bool adds_bos() const { return !prefix_.empty() && bos_id_ && prefix_.front() == *bos_id_; }
  // Ids that Encode(..., add_special_tokens=true) puts around the text.
  const std::vector<int32_t>& special_prefix() const { return prefix_; }
  const std::vector<int32_t>& special_suffix() const { return suffix_; }
  const std::string& origin() const { return origin_; }

  Tokenizer(const Tokenizer&) = delete;
  Tokenizer& operator=(const Tokenizer&) = delete;

 private:
  friend class TokenizerLoader;
  Tokenizer() = default;

  // EncodeTo for a text below 2 GiB.
  void EncodeChunk(std::string_view text, bool parse_special, std::vector<int32_t>* out) const;
  // Normalizes, pre-tokenizes and BPE-encodes text that holds no added tokens.
  void EncodePlain(std::string_view text, std::vector<int32_t>* out) const;
  // Added tokens matched on normalized text (normalized: true), then EncodePlain.
  void EncodeNormalized(std::string_view normalized, bool parse_special,
                        std::vector<int32_t>* out) const;

  std::string origin_;
  BpeModel bpe_;
  std::unique_ptr<PreTokenizer> pre_tokenizer_;  // null: the text is one word
  bool nfc_ = false;                             // normalizer NFC

  // Added tokens, split by when they are matched and whether they are special.
  AddedTokenMatcher raw_all_;           // normalized: false
  AddedTokenMatcher raw_plain_;         // normalized: false, special: false
  AddedTokenMatcher normalized_all_;    // normalized: true
  AddedTokenMatcher normalized_plain_;  // normalized: true, special: false
  std::unordered_map<std::string, int32_t> added_ids_;  // content -> id
  // Vocabulary entries outside the byte-level alphabet (no BPE can produce them), by text.
  std::unordered_map<std::string, int32_t> other_vocab_;

  // Per id: vocabulary text and bytes; for added tokens both are the content.
  std::vector<std::string> token_text_;
  std::vector<std::string> token_bytes_;
  std::vector<uint8_t> special_;  // 1 for special added tokens
  int32_t vocab_size_ = 0;

  std::vector<int32_t> prefix_;
  std::vector<int32_t> suffix_;
  std::optional<int32_t> bos_id_;
  std::optional<int32_t> eos_id_;
};

}  // namespace aicloud::engine
