// TextStream: turns a request's generated token ids into the text a client may see, piece by
// piece, honouring stop strings.
//
//   TextStream ts(&tokenizer, {"\n\n", "User:"}, /*skip_special=*/true);
//   for (int32_t id : new_tokens) {
//     TextStream::Piece p = ts.Push(id);
//     send(p.text);                       // never half a UTF-8 character, never part of a stop
//     if (p.stopped) break;               // a stop string matched: the text before it was sent
//   }
//   send(ts.Finish());                    // what was held back, when the request ends otherwise
//
// Byte-level BPE tokens are byte strings: one token may end in the middle of a multi-byte
// character, so text is released only up to the last complete UTF-8 sequence. Text that could
// still become the start of a stop string is held back until it cannot (OpenAI semantics: the
// stop string itself is not returned). Invalid UTF-8 that can never complete is released as
// U+FFFD, like Hugging Face decoding.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "engine/tokenizer/tokenizer.h"

namespace aicloud::engine {

class TextStream {
 public:
  struct Piece {
    std::string text;      // newly releasable text (may be empty)
    bool stopped = false;  // a stop string matched; nothing after it is ever released
  };

  // `tokenizer` must outlive the stream.
  TextStream(const Tokenizer* tokenizer, std::vector<std::string> stops, bool skip_special);

  Piece Push(int32_t id);
  // Releases whatever is held back (an incomplete character becomes U+FFFD). Call once at the
  // end of a request that did not stop on a stop string.
  std::string Finish();

  // Everything released so far.
  const std::string& text() const { return released_; }

 private:
  // Longest prefix of pending_ that is complete UTF-8 (invalid bytes replaced).
  size_t CompleteUtf8Prefix() const;

  const Tokenizer* tokenizer_;
  std::vector<std::string> stops_;
  size_t max_stop_ = 0;
  bool skip_special_;
  bool stopped_ = false;
  std::string pending_;   // decoded bytes not yet released
  std::string released_;
};

}  // namespace aicloud::engine
