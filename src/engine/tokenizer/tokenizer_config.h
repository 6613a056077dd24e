// TokenizerConfig: what the engine reads from a model's tokenizer_config.json (the transformers
// side file next to tokenizer.json): the special-token names, whether BOS/EOS are added, and
// the chat template text.
//
//   StatusOr<TokenizerConfig> config = TokenizerConfig::FromFile(dir + "/tokenizer_config.json");
//   auto tok = Tokenizer::FromFile(dir + "/tokenizer.json", *config);   // bos_id() from config
//   auto chat = ChatTemplate::FromConfig(*config);
//
// Token fields may be a string, null, or an AddedToken object ({"content": "...", ...}).
// Other fields of the file are ignored.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "core/status.h"

namespace aicloud::engine {

struct TokenizerConfig {
  std::string origin;  // the file it came from, for messages
  std::optional<std::string> bos_token;
  std::optional<std::string> eos_token;
  std::optional<std::string> pad_token;
  std::optional<std::string> unk_token;
  // Explicit add_bos_token / add_eos_token; unset means "as tokenizer.json's post_processor".
  std::optional<bool> add_bos_token;
  std::optional<bool> add_eos_token;
  // chat_template: a string, or from a list of {name, template} the one named "default".
  std::optional<std::string> chat_template;

  // NOT_FOUND for a missing file; INVALID_ARGUMENT naming the file and field otherwise.
  static StatusOr<TokenizerConfig> FromFile(const std::string& path);
  static StatusOr<TokenizerConfig> FromJson(std::string_view text, std::string_view origin);
};

// Reads a whole file; NOT_FOUND naming it when it cannot be opened.
StatusOr<std::string> ReadTokenizerFile(const std::string& path);

}  // namespace aicloud::engine
