#include "engine/tokenizer/tokenizer_config.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "engine/tokenizer/json_fields.h"

namespace aicloud::engine {
namespace {

using nlohmann::json;

// A token field: "<s>", null, or {"content": "<s>", ...}.
Status ReadToken(const json& root, std::string_view key, std::optional<std::string>* out) {
  const json* v = OptionalMember(root, key);
  if (v == nullptr) return OkStatus();
  if (v->is_string()) {
    *out = v->get<std::string>();
    return OkStatus();
  }
  if (v->is_object()) {
    StatusOr<std::string> content = StringMember(*v, "content", key);
    if (!content.ok()) return content.status();
    *out = std::move(*content);
    return OkStatus();
  }
  return FieldError(key, "expected a string, null or an object with \"content\"");
}

Status ReadBool(const json& root, std::string_view key, std::optional<bool>* out) {
  const json* v = OptionalMember(root, key);
  if (v == nullptr) return OkStatus();
  if (!v->is_boolean()) return FieldError(key, "expected true or false");
  *out = v->get<bool>();
  return OkStatus();
}

Status ReadChatTemplate(const json& root, std::optional<std::string>* out) {
  const json* v = OptionalMember(root, "chat_template");
  if (v == nullptr) return OkStatus();
  if (v->is_string()) {
    *out = v->get<std::string>();
    return OkStatus();
  }
  if (v->is_array()) {
    for (size_t i = 0; i < v->size(); ++i) {
      const json& entry = (*v)[i];
      const std::string field = IndexField("chat_template", i);
      StatusOr<std::string> name = StringMember(entry, "name", field);
      if (!name.ok()) return name.status();
      StatusOr<std::string> text = StringMember(entry, "template", field);
      if (!text.ok()) return text.status();
      if (*name == "default") {
        *out = std::move(*text);
        return OkStatus();
      }
    }
    return FieldError("chat_template", "a list of templates without one named \"default\"");
  }
  return FieldError("chat_template", "expected a string or a list of {name, template}");
}

}  // namespace

StatusOr<std::string> ReadTokenizerFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFoundError(fmt::format("{}: cannot open: {}", path, std::strerror(errno)));
  std::ostringstream buffer;
  buffer << in.rdbuf();
  if (in.bad()) return NotFoundError(fmt::format("{}: read failed", path));
  return buffer.str();
}

StatusOr<TokenizerConfig> TokenizerConfig::FromFile(const std::string& path) {
  StatusOr<std::string> text = ReadTokenizerFile(path);
  if (!text.ok()) return text.status();
  return FromJson(*text, path);
}

StatusOr<TokenizerConfig> TokenizerConfig::FromJson(std::string_view text,
                                                    std::string_view origin) {
  StatusOr<json> parsed = ParseJsonText(text, origin);
  if (!parsed.ok()) return parsed.status();
  const json& root = *parsed;
  if (!root.is_object()) {
    return InvalidArgumentError(fmt::format("{}: expected a JSON object", origin));
  }
  TokenizerConfig config;
  config.origin = std::string(origin);
  for (Status s : {ReadToken(root, "bos_token", &config.bos_token),
                   ReadToken(root, "eos_token", &config.eos_token),
                   ReadToken(root, "pad_token", &config.pad_token),
                   ReadToken(root, "unk_token", &config.unk_token),
                   ReadBool(root, "add_bos_token", &config.add_bos_token),
                   ReadBool(root, "add_eos_token", &config.add_eos_token),
                   ReadChatTemplate(root, &config.chat_template)}) {
    if (!s.ok()) return WithOrigin(s, origin);
  }
  return config;
}

}  // namespace aicloud::engine
