// The byte-level alphabet of GPT-2-style BPE vocabularies.
//
// Byte-level tokenizers write every token of their vocabulary as text in which each byte of the
// token is one printable code point: bytes '!'..'~', 0xA1..0xAC and 0xAE..0xFF stand for
// themselves, the other 68 bytes (controls, space, 0x7F..0xA0, 0xAD) become U+0100.. in byte
// order, so " the" is written "Ġthe" (U+0120 = byte 0x20). This is the mapping of OpenAI's GPT-2
// `bytes_to_unicode`, which Hugging Face's ByteLevel pre-tokenizer and decoder also use.
//
// The tokenizer converts vocabulary and merges from this alphabet to raw bytes once at load time
// and runs BPE on raw bytes, so text is never mapped at encode time.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace aicloud::engine {

// The code point that stands for byte b in vocabulary text.
char32_t ByteToVocabChar(unsigned char b);

// The byte that vocabulary code point c stands for, or nullopt when c is not in the alphabet.
std::optional<unsigned char> VocabCharToByte(char32_t c);

// Raw bytes of a token written in the byte-level alphabet ("Ġthe" -> " the"), or nullopt when
// the text holds a character outside the alphabet or is not valid UTF-8.
std::optional<std::string> VocabTextToBytes(std::string_view text);

// The inverse: raw bytes to vocabulary text (" the" -> "Ġthe").
std::string BytesToVocabText(std::string_view bytes);

}  // namespace aicloud::engine
