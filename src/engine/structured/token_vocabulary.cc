#include "engine/structured/token_vocabulary.h"

#include <algorithm>
#include <limits>
#include <utility>

namespace aicloud::engine::structured {

std::shared_ptr<const TokenVocabulary> TokenVocabulary::Build(const Tokenizer& tok,
                                                              int32_t model_vocab_size,
                                                              std::vector<int32_t> eos_ids) {
  const int32_t n = std::min(tok.VocabSize(), std::max(model_vocab_size, 0));
  std::vector<std::string> bytes(n);
  for (int32_t id = 0; id < n; ++id) {
    if (!tok.IsSpecial(id)) bytes[id] = std::string(tok.TokenBytes(id));
  }
  return FromBytes(std::move(bytes), model_vocab_size, std::move(eos_ids));
}

std::shared_ptr<const TokenVocabulary> TokenVocabulary::FromBytes(
    std::vector<std::string> token_bytes, int32_t model_vocab_size, std::vector<int32_t> eos_ids) {
  std::shared_ptr<TokenVocabulary> v(new TokenVocabulary());
  v->size_ = std::max(model_vocab_size, 0);
  for (int32_t id : eos_ids) {
    if (id >= 0 && id < v->size_) v->eos_ids_.push_back(id);
  }
  std::sort(v->eos_ids_.begin(), v->eos_ids_.end());
  v->eos_ids_.erase(std::unique(v->eos_ids_.begin(), v->eos_ids_.end()), v->eos_ids_.end());
  if (token_bytes.size() > static_cast<size_t>(v->size_)) token_bytes.resize(v->size_);
  for (int32_t id : v->eos_ids_) {
    if (static_cast<size_t>(id) < token_bytes.size()) token_bytes[id].clear();
  }
  constexpr size_t kMaxTokenBytes = std::numeric_limits<uint16_t>::max();
  std::vector<int32_t> order;
  for (size_t id = 0; id < token_bytes.size(); ++id) {
    if (token_bytes[id].size() > kMaxTokenBytes) token_bytes[id].clear();
    if (!token_bytes[id].empty()) order.push_back(static_cast<int32_t>(id));
  }
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    return token_bytes[a] != token_bytes[b] ? token_bytes[a] < token_bytes[b] : a < b;
  });

  // Depth-first flat trie from the sorted strings: a string shares the path of its longest
  // common prefix with the one before it.
  v->byte_.push_back(0);
  v->depth_.push_back(0);
  v->end_.push_back(0);
  std::vector<int32_t> node_tokens(1, 0);
  std::vector<int32_t> path = {0};
  std::string_view prev;
  for (int32_t id : order) {
    const std::string_view b = token_bytes[id];
    size_t lcp = 0;
    while (lcp < prev.size() && lcp < b.size() && prev[lcp] == b[lcp]) ++lcp;
    while (path.size() - 1 > lcp) {
      v->end_[path.back()] = static_cast<int32_t>(v->byte_.size());
      path.pop_back();
    }
    for (size_t j = lcp; j < b.size(); ++j) {
      path.push_back(static_cast<int32_t>(v->byte_.size()));
      v->byte_.push_back(static_cast<uint8_t>(b[j]));
      v->depth_.push_back(static_cast<uint16_t>(j + 1));
      v->end_.push_back(0);
      node_tokens.push_back(0);
    }
    ++node_tokens[path.back()];
    v->ids_.push_back(id);
    v->max_depth_ = std::max(v->max_depth_, static_cast<int32_t>(b.size()));
    prev = b;
  }
  for (int32_t node : path) v->end_[node] = static_cast<int32_t>(v->byte_.size());
  v->token_begin_.assign(v->byte_.size() + 1, 0);
  for (size_t i = 0; i < node_tokens.size(); ++i) {
    v->token_begin_[i + 1] = v->token_begin_[i] + node_tokens[i];
  }

  std::vector<bool> single(256, false);
  for (const std::string& b : token_bytes) {
    if (b.size() == 1) single[static_cast<uint8_t>(b[0])] = true;
  }
  v->has_all_bytes_ = std::all_of(single.begin(), single.end(), [](bool x) { return x; });
  v->bytes_ = std::move(token_bytes);
  return v;
}

bool TokenVocabulary::IsEos(int32_t t) const {
  return std::binary_search(eos_ids_.begin(), eos_ids_.end(), t);
}

}  // namespace aicloud::engine::structured
