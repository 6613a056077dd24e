// StreamDecoder: token ids to text one token at a time, for streaming responses.
//
//   StreamDecoder out(tokenizer, /*skip_special_tokens=*/true);
//   for (int32_t id : generated) send(out.Push(id));   // each piece is whole UTF-8
//   send(out.Finish());
//
// Byte-level tokens often end inside a UTF-8 character (an emoji or a CJK character is usually
// two or three tokens). Push holds such trailing bytes back until the character is complete, so
// every piece it returns is valid UTF-8 when the model's output is; the concatenation of all
// pieces and Finish() is exactly Decode(ids). Bytes that can never become valid UTF-8 are not
// held: they are returned as they are, at once.
//
// Thread-compatible: one decoder per stream. The tokenizer must outlive it.
#pragma once

#include <cstdint>
#include <string>

#include "engine/tokenizer/tokenizer.h"

namespace aicloud::engine {

class StreamDecoder {
 public:
  StreamDecoder(const Tokenizer& tokenizer, bool skip_special_tokens)
      : tokenizer_(tokenizer), skip_special_tokens_(skip_special_tokens) {}

  // The text that this token completes; empty while a character is still incomplete.
  std::string Push(int32_t id);
  // What is still held (the start of a character the stream never finished).
  std::string Finish();

 private:
  const Tokenizer& tokenizer_;
  bool skip_special_tokens_;
  std::string pending_;
};

}  // namespace aicloud::engine
