// Encoding and decoding. Loading a tokenizer.json is in tokenizer_json.cc.
#include "engine/tokenizer/tokenizer.h"

#include "engine/tokenizer/byte_level.h"
#include "engine/tokenizer/unicode_nfc.h"

namespace aicloud::engine {

std::vector<int32_t> Tokenizer::Encode(std::string_view text, bool add_special_tokens,
                                       bool parse_special) const {
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + prefix_.size() + suffix_.size() + 1);
  if (add_special_tokens) out.insert(out.end(), prefix_.begin(), prefix_.end());
  EncodeTo(text, parse_special, &out);
  if (add_special_tokens) out.insert(out.end(), suffix_.begin(), suffix_.end());
  return out;
}

void Tokenizer::EncodeTo(std::string_view text, bool parse_special,
                         std::vector<int32_t>* out) const {
  // Offsets inside the pieces are 32-bit: a text beyond 2 GiB goes in consecutive chunks, cut at
  // a character boundary (tokens cannot span a cut, which nothing realistic will notice).
  constexpr size_t kMaxChunk = size_t{1} << 31;
  while (text.size() > kMaxChunk) {
    size_t cut = kMaxChunk;
    while (cut > kMaxChunk - 4 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;
    EncodeChunk(text.substr(0, cut), parse_special, out);
    text.remove_prefix(cut);
  }
  EncodeChunk(text, parse_special, out);
}

void Tokenizer::EncodeChunk(std::string_view text, bool parse_special,
                            std::vector<int32_t>* out) const {
  std::string normalized;
  auto encode_segment = [&](std::string_view segment) {
    if (nfc_ && !IsNfcQuickCheckYes(segment)) {
      normalized.clear();
      NormalizeNfc(segment, &normalized);
      segment = normalized;
    }
    EncodeNormalized(segment, parse_special, out);
  };
  const AddedTokenMatcher& added = parse_special ? raw_all_ : raw_plain_;
  if (added.empty()) {
    encode_segment(text);
    return;
  }
  std::vector<AddedTokenMatcher::Piece> pieces;
  added.Split(text, &pieces);
  for (const AddedTokenMatcher::Piece& piece : pieces) {
    if (piece.id >= 0) {
      out->push_back(piece.id);
    } else {
      encode_segment(text.substr(piece.begin, piece.end - piece.begin));
    }
  }
}

void Tokenizer::EncodeNormalized(std::string_view normalized, bool parse_special,
                                 std::vector<int32_t>* out) const {
  const AddedTokenMatcher& added = parse_special ? normalized_all_ : normalized_plain_;
  if (added.empty()) {
    EncodePlain(normalized, out);
    return;
  }
  std::vector<AddedTokenMatcher::Piece> pieces;
  added.Split(normalized, &pieces);
  for (const AddedTokenMatcher::Piece& piece : pieces) {
    if (piece.id >= 0) {
      out->push_back(piece.id);
    } else {
      EncodePlain(normalized.substr(piece.begin, piece.end - piece.begin), out);
    }
  }
}

void Tokenizer::EncodePlain(std::string_view text, std::vector<int32_t>* out) const {
  if (text.empty()) return;
  if (!pre_tokenizer_) {
    bpe_.EncodeWord(text, out);
    return;
  }
  thread_local PreTokenized p;
  p.Reset(text);
  pre_tokenizer_->Apply(&p);
  for (const TextSpan& span : p.spans) bpe_.EncodeWord(p.Piece(span), out);
}

std::string Tokenizer::Decode(std::span<const int32_t> ids, bool skip_special_tokens) const {
  std::string out;
  for (int32_t id : ids) {
    if (id < 0 || id >= vocab_size_) continue;
    if (skip_special_tokens && special_[id]) continue;
    out += token_bytes_[id];
  }
  return out;
}

std::string_view Tokenizer::TokenText(int32_t id) const {
  if (id < 0 || id >= vocab_size_) return {};
  return token_text_[id];
}

std::string_view Tokenizer::TokenBytes(int32_t id) const {
  if (id < 0 || id >= vocab_size_) return {};
  return token_bytes_[id];
}

std::optional<int32_t> Tokenizer::FindToken(std::string_view text) const {
  if (auto it = added_ids_.find(std::string(text)); it != added_ids_.end()) return it->second;
  if (auto it = other_vocab_.find(std::string(text)); it != other_vocab_.end()) {
    return it->second;
  }
  if (std::optional<std::string> bytes = VocabTextToBytes(text)) return bpe_.FindBytes(*bytes);
  return std::nullopt;
}

bool Tokenizer::IsSpecial(int32_t id) const {
  return id >= 0 && id < vocab_size_ && special_[id] != 0;
}

}  // namespace aicloud::engine
