// Loading a Hugging Face tokenizer.json (the format of the `tokenizers` library) into a
// Tokenizer. Field meanings follow that library's serialization; every error names the file and
// the field, and nothing here throws.
#include <algorithm>
#include <unordered_map>

#include "engine/tokenizer/byte_level.h"
#include "engine/tokenizer/json_fields.h"
#include "engine/tokenizer/token_index.h"
#include "engine/tokenizer/tokenizer.h"
#include "engine/tokenizer/unicode_nfc.h"

namespace aicloud::engine {

using nlohmann::json;

class TokenizerLoader {
 public:
  static StatusOr<std::unique_ptr<Tokenizer>> Load(std::string_view text, std::string_view origin,
                                                   const TokenizerConfig* config) {
    StatusOr<json> root = ParseJsonText(text, origin);
    if (!root.ok()) return root.status();
    if (!root->is_object()) {
      return InvalidArgumentError(fmt::format("{}: expected a JSON object", origin));
    }
    TokenizerLoader loader;
    loader.t_->origin_ = std::string(origin);
    Status s = loader.LoadAll(*root);
    if (!s.ok()) return WithOrigin(s, origin);
    // These messages name the config file and the tokenizer file themselves.
    AICLOUD_RETURN_IF_ERROR(loader.ResolveSpecialTokens(config));
    return std::move(loader.t_);
  }

 private:
  TokenizerLoader() : t_(new Tokenizer()) {}

  Status LoadAll(const json& root) {
    StatusOr<const json*> model = RequiredMember(root, "model", "");
    if (!model.ok()) return model.status();
    AICLOUD_RETURN_IF_ERROR(LoadModel(**model));
    AICLOUD_RETURN_IF_ERROR(LoadNormalizer(Member(root, "normalizer"), "normalizer"));
    if (const json* added = OptionalMember(root, "added_tokens")) {
      AICLOUD_RETURN_IF_ERROR(LoadAddedTokens(*added));
    }
    PreTokenizerInfo info;
    StatusOr<std::unique_ptr<PreTokenizer>> pre =
        ParsePreTokenizer(Member(root, "pre_tokenizer"), "pre_tokenizer", &info);
    if (!pre.ok()) return pre.status();
    if (!info.byte_level) {
      return UnimplementedError(
          "pre_tokenizer: no ByteLevel step; only byte-level BPE tokenizers (GPT-2, Llama-3, "
          "Qwen2 style) are supported");
    }
    t_->pre_tokenizer_ = std::move(*pre);
    AICLOUD_RETURN_IF_ERROR(LoadDecoder(Member(root, "decoder"), "decoder"));
    AICLOUD_RETURN_IF_ERROR(
        LoadPostProcessor(Member(root, "post_processor"), "post_processor", &t_->prefix_,
                          &t_->suffix_));
    return OkStatus();
  }

  static const json& Member(const json& object, std::string_view key) {
    static const json kNull;
    const json* v = OptionalMember(object, key);
    return v ? *v : kNull;
  }

  // Ids beyond this are refused, so a corrupt file cannot make the per-id tables huge. The
  // largest vocabularies in use are a few hundred thousand tokens.
  static constexpr int32_t kMaxTokenId = (1 << 24) - 1;

  static Status CheckIdRange(int32_t id, const std::string& field) {
    if (id > kMaxTokenId) {
      return FieldError(field, fmt::format("id {} is larger than the {} this engine accepts", id,
                                           kMaxTokenId));
    }
    return OkStatus();
  }

  // Makes room for token `id` in the per-id tables.
  // REQUIRES: id <= kMaxTokenId.
  void Reserve(int32_t id) {
    if (id < t_->vocab_size_) return;
    t_->vocab_size_ = id + 1;
    t_->token_text_.resize(t_->vocab_size_);
    t_->token_bytes_.resize(t_->vocab_size_);
    t_->special_.resize(t_->vocab_size_);
  }

  Status LoadModel(const json& model) {
    if (!model.is_object()) return FieldError("model", "expected an object");
    StatusOr<std::string> type = StringMember(model, "type", "model");
    if (!type.ok()) return type.status();
    if (*type != "BPE") {
      return UnimplementedError(fmt::format(
          "model.type: \"{}\" models are not supported; only byte-level BPE is", *type));
    }
    AICLOUD_RETURN_IF_ERROR(LoadModelOptions(model));

    StatusOr<const json*> vocab = RequiredMember(model, "vocab", "model");
    if (!vocab.ok()) return vocab.status();
    if (!(*vocab)->is_object()) return FieldError("model.vocab", "expected an object");
    int32_t max_id = -1;
    for (const auto& [text, value] : (*vocab)->items()) {
      const std::string field = fmt::format("model.vocab[\"{}\"]", text);
      StatusOr<int32_t> id = TokenIdValue(value, field);
      if (!id.ok()) return id.status();
      AICLOUD_RETURN_IF_ERROR(CheckIdRange(*id, field));
      max_id = std::max(max_id, *id);
    }
    Reserve(max_id);
    t_->bpe_.Reserve(static_cast<size_t>(max_id) + 1);
    std::vector<bool> seen(max_id + 1);
    vocab_index_.Reserve((*vocab)->size());
    for (const auto& [text, value] : (*vocab)->items()) {
      const auto id = static_cast<int32_t>(value.get<int64_t>());
      if (seen[id]) {
        return FieldError(fmt::format("model.vocab[\"{}\"]", text),
                          fmt::format("id {} is already used by \"{}\"", id, t_->token_text_[id]));
      }
      seen[id] = true;
      t_->token_text_[id] = text;
      vocab_index_.Insert(t_->token_text_, id);  // JSON object keys are unique
      if (std::optional<std::string> bytes = VocabTextToBytes(text)) {
        t_->bpe_.AddToken(*bytes, id);
        t_->token_bytes_[id] = std::move(*bytes);
      } else {
        // Not in the byte-level alphabet: BPE never produces it; it decodes as its text.
        t_->other_vocab_.emplace(text, id);
        t_->token_bytes_[id] = text;
      }
    }
    AICLOUD_RETURN_IF_ERROR(LoadMerges(model));
    AICLOUD_RETURN_IF_ERROR(LoadUnk(model));
    return OkStatus();
  }

  Status LoadModelOptions(const json& model) {
    if (const json* dropout = OptionalMember(model, "dropout")) {
      if (!dropout->is_number()) return FieldError("model.dropout", "expected a number or null");
      if (dropout->get<double>() != 0.0) {
        return UnimplementedError("model.dropout: BPE dropout is a training option and is not "
                                  "supported; set it to null");
      }
    }
    for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
      if (const json* v = OptionalMember(model, key)) {
        if (!v->is_string()) return FieldError(SubField("model", key), "expected a string");
        if (!v->get<std::string>().empty()) {
          return UnimplementedError(fmt::format(
              "model.{}: \"{}\" is not supported by byte-level BPE", key, v->get<std::string>()));
        }
      }
    }
    StatusOr<bool> byte_fallback = BoolMember(model, "byte_fallback", "model", false);
    if (!byte_fallback.ok()) return byte_fallback.status();
    if (*byte_fallback) {
      return UnimplementedError("model.byte_fallback: true is SentencePiece-style BPE "
                                "(<0xNN> tokens), not supported; only byte-level BPE is");
    }
    StatusOr<bool> ignore_merges = BoolMember(model, "ignore_merges", "model", false);
    if (!ignore_merges.ok()) return ignore_merges.status();
    t_->bpe_.set_ignore_merges(*ignore_merges);
    return OkStatus();
  }

  Status LoadMerges(const json& model) {
    StatusOr<const json*> merges = RequiredMember(model, "merges", "model");
    if (!merges.ok()) return merges.status();
    if (!(*merges)->is_array()) return FieldError("model.merges", "expected an array");
    std::string merged;
    for (size_t i = 0; i < (*merges)->size(); ++i) {
      const json& m = (**merges)[i];
      const std::string field = IndexField("model.merges", i);
      std::string_view left, right;
      if (m.is_string()) {
        // "left right": the two tokens, separated by the first space.
        const std::string& s = m.get_ref<const std::string&>();
        const size_t space = s.find(' ');
        if (space == std::string::npos) {
          return FieldError(field, fmt::format("\"{}\" is not two tokens separated by a space", s));
        }
        left = std::string_view(s).substr(0, space);
        right = std::string_view(s).substr(space + 1);
      } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
        left = m[0].get_ref<const std::string&>();
        right = m[1].get_ref<const std::string&>();
      } else {
        return FieldError(field, "expected \"left right\" or [\"left\", \"right\"]");
      }
      StatusOr<int32_t> left_id = VocabId(left, field);
      if (!left_id.ok()) return left_id.status();
      StatusOr<int32_t> right_id = VocabId(right, field);
      if (!right_id.ok()) return right_id.status();
      merged.assign(left);
      merged.append(right);
      std::optional<int32_t> merged_id = vocab_index_.Find(t_->token_text_, merged);
      if (!merged_id) {
        return FieldError(field, fmt::format("merged token \"{}\" is not in model.vocab", merged));
      }
      t_->bpe_.AddMerge(*left_id, *right_id, *merged_id);
    }
    return OkStatus();
  }

  StatusOr<int32_t> VocabId(std::string_view text, const std::string& field) {
    std::optional<int32_t> id = vocab_index_.Find(t_->token_text_, text);
    if (!id) return FieldError(field, fmt::format("token \"{}\" is not in model.vocab", text));
    return *id;
  }

  Status LoadUnk(const json& model) {
    std::optional<int32_t> unk;
    if (const json* v = OptionalMember(model, "unk_token")) {
      if (!v->is_string()) return FieldError("model.unk_token", "expected a string or null");
      StatusOr<int32_t> id = VocabId(v->get<std::string>(), "model.unk_token");
      if (!id.ok()) return id.status();
      unk = *id;
    }
    StatusOr<bool> fuse_unk = BoolMember(model, "fuse_unk", "model", false);
    if (!fuse_unk.ok()) return fuse_unk.status();
    t_->bpe_.set_unk(unk, *fuse_unk);
    return OkStatus();
  }

  Status LoadNormalizer(const json& value, const std::string& field) {
    if (value.is_null()) return OkStatus();
    if (!value.is_object()) return FieldError(field, "expected an object or null");
    StatusOr<std::string> type = StringMember(value, "type", field);
    if (!type.ok()) return type.status();
    if (*type == "NFC") {
      t_->nfc_ = true;
      return OkStatus();
    }
    if (*type == "Sequence") {
      StatusOr<const json*> list = RequiredMember(value, "normalizers", field);
      if (!list.ok()) return list.status();
      const std::string list_field = SubField(field, "normalizers");
      if (!(*list)->is_array()) return FieldError(list_field, "expected an array");
      for (size_t i = 0; i < (*list)->size(); ++i) {
        AICLOUD_RETURN_IF_ERROR(LoadNormalizer((**list)[i], IndexField(list_field, i)));
      }
      return OkStatus();
    }
    return UnimplementedError(fmt::format(
        "{}: normalizer type \"{}\" is not supported (supported: NFC, Sequence)",
        SubField(field, "type"), *type));
  }

  Status LoadAddedTokens(const json& list) {
    if (!list.is_array()) return FieldError("added_tokens", "expected an array");
    for (size_t i = 0; i < list.size(); ++i) {
      const json& entry = list[i];
      const std::string field = IndexField("added_tokens", i);
      if (!entry.is_object()) return FieldError(field, "expected an object");
      AddedToken token;
      StatusOr<const json*> id = RequiredMember(entry, "id", field);
      if (!id.ok()) return id.status();
      StatusOr<int32_t> id_value = TokenIdValue(**id, SubField(field, "id"));
      if (!id_value.ok()) return id_value.status();
      AICLOUD_RETURN_IF_ERROR(CheckIdRange(*id_value, SubField(field, "id")));
      token.id = *id_value;
      StatusOr<std::string> content = StringMember(entry, "content", field);
      if (!content.ok()) return content.status();
      if (content->empty()) return FieldError(SubField(field, "content"), "empty");
      token.content = std::move(*content);
      struct Flag {
        const char* key;
        bool* value;
        bool fallback;
      };
      StatusOr<bool> special = BoolMember(entry, "special", field, false);
      if (!special.ok()) return special.status();
      token.special = *special;
      for (Flag f : {Flag{"lstrip", &token.lstrip, false}, Flag{"rstrip", &token.rstrip, false},
                     Flag{"single_word", &token.single_word, false},
                     Flag{"normalized", &token.normalized, !token.special}}) {
        StatusOr<bool> v = BoolMember(entry, f.key, field, f.fallback);
        if (!v.ok()) return v.status();
        *f.value = *v;
      }
      Reserve(token.id);
      t_->token_text_[token.id] = token.content;
      t_->token_bytes_[token.id] = token.content;
      t_->special_[token.id] = token.special ? 1 : 0;
      t_->added_ids_.emplace(token.content, token.id);
      if (token.normalized) {
        // Matched against normalized text, so the content is normalized too.
        if (t_->nfc_) {
          std::string nfc;
          NormalizeNfc(token.content, &nfc);
          token.content = std::move(nfc);
        }
        t_->normalized_all_.Add(token);
        if (!token.special) t_->normalized_plain_.Add(token);
      } else {
        t_->raw_all_.Add(token);
        if (!token.special) t_->raw_plain_.Add(token);
      }
    }
    return OkStatus();
  }

  Status LoadDecoder(const json& value, const std::string& field) {
    // None is read as ByteLevel: a byte-level vocabulary means nothing decoded any other way.
    if (value.is_null()) return OkStatus();
    if (!value.is_object()) return FieldError(field, "expected an object or null");
    StatusOr<std::string> type = StringMember(value, "type", field);
    if (!type.ok()) return type.status();
    if (*type == "ByteLevel") return OkStatus();
    if (*type == "Sequence") {
      StatusOr<const json*> list = RequiredMember(value, "decoders", field);
      if (!list.ok()) return list.status();
      const std::string list_field = SubField(field, "decoders");
      if (!(*list)->is_array()) return FieldError(list_field, "expected an array");
      for (size_t i = 0; i < (*list)->size(); ++i) {
        AICLOUD_RETURN_IF_ERROR(LoadDecoder((**list)[i], IndexField(list_field, i)));
      }
      return OkStatus();
    }
    return UnimplementedError(fmt::format(
        "{}: decoder type \"{}\" is not supported (supported: ByteLevel)", SubField(field, "type"),
        *type));
  }

  // A token id named by a post-processor must be a token.
  Status CheckTokenId(int32_t id, const std::string& field) {
    if (id >= t_->vocab_size_ || t_->token_text_[id].empty()) {
      return FieldError(field, fmt::format("id {} is not a token", id));
    }
    return OkStatus();
  }

  // Reads `processor` into the ids it puts before and after the text (single sequences only).
  Status LoadPostProcessor(const json& value, const std::string& field,
                           std::vector<int32_t>* prefix, std::vector<int32_t>* suffix) {
    if (value.is_null()) return OkStatus();
    if (!value.is_object()) return FieldError(field, "expected an object or null");
    StatusOr<std::string> type = StringMember(value, "type", field);
    if (!type.ok()) return type.status();
    if (*type == "ByteLevel") return OkStatus();  // offsets only
    if (*type == "TemplateProcessing") return LoadTemplate(value, field, prefix, suffix);
    if (*type == "RobertaProcessing" || *type == "BertProcessing") {
      // cls: ["<s>", 0], sep: ["</s>", 2]: single sequences become cls A sep.
      int32_t ids[2];
      const char* keys[2] = {"cls", "sep"};
      for (int k = 0; k < 2; ++k) {
        const std::string key_field = SubField(field, keys[k]);
        StatusOr<const json*> v = RequiredMember(value, keys[k], field);
        if (!v.ok()) return v.status();
        if (!(*v)->is_array() || (*v)->size() != 2 || !(**v)[0].is_string()) {
          return FieldError(key_field, "expected [\"token\", id]");
        }
        StatusOr<int32_t> id = TokenIdValue((**v)[1], IndexField(key_field, 1));
        if (!id.ok()) return id.status();
        AICLOUD_RETURN_IF_ERROR(CheckTokenId(*id, key_field));
        ids[k] = *id;
      }
      prefix->insert(prefix->begin(), ids[0]);
      suffix->push_back(ids[1]);
      return OkStatus();
    }
    if (*type == "Sequence") {
      StatusOr<const json*> list = RequiredMember(value, "processors", field);
      if (!list.ok()) return list.status();
      const std::string list_field = SubField(field, "processors");
      if (!(*list)->is_array()) return FieldError(list_field, "expected an array");
      for (size_t i = 0; i < (*list)->size(); ++i) {
        // Each processor wraps what the ones before it produced.
        std::vector<int32_t> p, s;
        AICLOUD_RETURN_IF_ERROR(
            LoadPostProcessor((**list)[i], IndexField(list_field, i), &p, &s));
        prefix->insert(prefix->begin(), p.begin(), p.end());
        suffix->insert(suffix->end(), s.begin(), s.end());
      }
      return OkStatus();
    }
    return UnimplementedError(fmt::format(
        "{}: post-processor type \"{}\" is not supported (supported: ByteLevel, "
        "TemplateProcessing, RobertaProcessing, BertProcessing, Sequence)",
        SubField(field, "type"), *type));
  }

  // TemplateProcessing: "single" lists SpecialToken and Sequence items; the SpecialToken names
  // resolve through "special_tokens" to ids.
  Status LoadTemplate(const json& value, const std::string& field, std::vector<int32_t>* prefix,
                      std::vector<int32_t>* suffix) {
    StatusOr<const json*> single = RequiredMember(value, "single", field);
    if (!single.ok()) return single.status();
    const std::string single_field = SubField(field, "single");
    if (!(*single)->is_array()) return FieldError(single_field, "expected an array");
    const json* specials = OptionalMember(value, "special_tokens");
    const std::string specials_field = SubField(field, "special_tokens");
    bool seen_sequence = false;
    std::vector<int32_t> before, after;
    for (size_t i = 0; i < (*single)->size(); ++i) {
      const json& item = (**single)[i];
      const std::string item_field = IndexField(single_field, i);
      if (const json* seq = OptionalMember(item, "Sequence")) {
        StatusOr<std::string> id = StringMember(*seq, "id", SubField(item_field, "Sequence"));
        if (!id.ok()) return id.status();
        if (*id != "A" || seen_sequence) {
          return FieldError(item_field, "a single-sequence template must name sequence A once");
        }
        seen_sequence = true;
      } else if (const json* special = OptionalMember(item, "SpecialToken")) {
        const std::string special_field = SubField(item_field, "SpecialToken");
        StatusOr<std::string> name = StringMember(*special, "id", special_field);
        if (!name.ok()) return name.status();
        const json* entry = specials ? OptionalMember(*specials, *name) : nullptr;
        if (entry == nullptr) {
          return FieldError(SubField(special_field, "id"),
                            fmt::format("\"{}\" is not in {}", *name, specials_field));
        }
        const std::string entry_field = fmt::format("{}[\"{}\"].ids", specials_field, *name);
        const json* ids = OptionalMember(*entry, "ids");
        if (ids == nullptr || !ids->is_array()) return FieldError(entry_field, "expected an array");
        for (size_t k = 0; k < ids->size(); ++k) {
          StatusOr<int32_t> id = TokenIdValue((*ids)[k], IndexField(entry_field, k));
          if (!id.ok()) return id.status();
          AICLOUD_RETURN_IF_ERROR(CheckTokenId(*id, IndexField(entry_field, k)));
          (seen_sequence ? after : before).push_back(*id);
        }
      } else {
        return FieldError(item_field, "expected {\"Sequence\": ...} or {\"SpecialToken\": ...}");
      }
    }
    if (!seen_sequence) return FieldError(single_field, "no {\"Sequence\": {\"id\": \"A\"}} item");
    prefix->insert(prefix->begin(), before.begin(), before.end());
    suffix->insert(suffix->end(), after.begin(), after.end());
    return OkStatus();
  }

  // BOS/EOS ids, and tokenizer_config.json's explicit add_bos_token / add_eos_token.
  Status ResolveSpecialTokens(const TokenizerConfig* config) {
    auto resolve = [&](const std::optional<std::string>& name, const char* key,
                       std::initializer_list<const char*> usual,
                       std::optional<int32_t>* out) -> Status {
      if (config != nullptr) {
        // The config is authoritative: absent or null means there is no such token.
        if (!name) return OkStatus();
        std::optional<int32_t> id = t_->FindToken(*name);
        if (!id) {
          return InvalidArgumentError(fmt::format("{}: {}: \"{}\" is not a token of {}",
                                                  config->origin, key, *name, t_->origin_));
        }
        *out = id;
        return OkStatus();
      }
      // Only added tokens: "<s>" may also be an ordinary BPE entry (Qwen2 has one).
      for (const char* candidate : usual) {
        if (auto it = t_->added_ids_.find(candidate); it != t_->added_ids_.end()) {
          *out = it->second;
          break;
        }
      }
      return OkStatus();
    };
    static const std::optional<std::string> kNone;
    AICLOUD_RETURN_IF_ERROR(resolve(config ? config->bos_token : kNone, "bos_token",
                                    {"<|begin_of_text|>", "<s>", "<|startoftext|>", "<bos>"},
                                    &t_->bos_id_));
    AICLOUD_RETURN_IF_ERROR(resolve(config ? config->eos_token : kNone, "eos_token",
                                    {"<|end_of_text|>", "<|endoftext|>", "</s>", "<eos>"},
                                    &t_->eos_id_));
    if (config == nullptr) return OkStatus();
    std::vector<int32_t>& prefix = t_->prefix_;
    std::vector<int32_t>& suffix = t_->suffix_;
    if (config->add_bos_token) {
      const bool has = t_->bos_id_ && !prefix.empty() && prefix.front() == *t_->bos_id_;
      if (*config->add_bos_token && !has) {
        if (!t_->bos_id_) {
          return InvalidArgumentError(fmt::format(
              "{}: add_bos_token: true, but there is no bos_token", config->origin));
        }
        prefix.insert(prefix.begin(), *t_->bos_id_);
      } else if (!*config->add_bos_token && has) {
        prefix.erase(prefix.begin());
      }
    }
    if (config->add_eos_token) {
      const bool has = t_->eos_id_ && !suffix.empty() && suffix.back() == *t_->eos_id_;
      if (*config->add_eos_token && !has) {
        if (!t_->eos_id_) {
          return InvalidArgumentError(fmt::format(
              "{}: add_eos_token: true, but there is no eos_token", config->origin));
        }
        suffix.push_back(*t_->eos_id_);
      } else if (!*config->add_eos_token && has) {
        suffix.pop_back();
      }
    }
    return OkStatus();
  }

  std::unique_ptr<Tokenizer> t_;
  // Vocabulary text -> id over token_text_, used while the model loads (before added tokens
  // can change token_text_).
  TokenIndex vocab_index_;
};

StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromJson(std::string_view text,
                                                        std::string_view origin) {
  return TokenizerLoader::Load(text, origin, nullptr);
}

StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromJson(std::string_view text,
                                                        std::string_view origin,
                                                        const TokenizerConfig& config) {
  return TokenizerLoader::Load(text, origin, &config);
}

StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromFile(const std::string& path) {
  StatusOr<std::string> text = ReadTokenizerFile(path);
  if (!text.ok()) return text.status();
  return TokenizerLoader::Load(*text, path, nullptr);
}

StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromFile(const std::string& path,
                                                        const TokenizerConfig& config) {
  StatusOr<std::string> text = ReadTokenizerFile(path);
  if (!text.ok()) return text.status();
  return TokenizerLoader::Load(*text, path, &config);
}

}  // namespace aicloud::engine
