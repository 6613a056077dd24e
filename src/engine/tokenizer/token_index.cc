#include "engine/tokenizer/token_index.h"

#include <algorithm>
#include <bit>

namespace aicloud::engine {

void TokenIndex::Reserve(size_t count) {
  // Slots for a load factor of at most 1/2.
  const size_t want = std::bit_ceil(std::max<size_t>(64, count * 2));
  if (want > slots_.size()) {
    std::vector<Slot> old = std::move(slots_);
    slots_.assign(want, Slot{0, -1});
    const size_t mask = slots_.size() - 1;
    for (const Slot& s : old) {
      if (s.id < 0) continue;
      // The tag is the hash's low 32 bits and the mask has fewer bits (fewer than 2^32 slots),
      // so the tag picks the same start slot as the full hash would.
      size_t i = s.tag & mask;
      while (slots_[i].id >= 0) i = (i + 1) & mask;
      slots_[i] = s;
    }
  }
}

bool TokenIndex::Insert(const std::vector<std::string>& keys, int32_t id) {
  const std::string& key = keys[id];
  const uint64_t hash = Hash(key);
  if (Find(keys, key, hash)) return false;
  if ((size_ + 1) * 2 > slots_.size()) Reserve(std::max<size_t>(size_ + 1, size_ * 2));
  const size_t mask = slots_.size() - 1;
  size_t i = hash & mask;
  while (slots_[i].id >= 0) i = (i + 1) & mask;
  slots_[i] = {static_cast<uint32_t>(hash), id};
  ++size_;
  return true;
}

std::optional<int32_t> TokenIndex::Find(const std::vector<std::string>& keys,
                                        std::string_view key, uint64_t hash) const {
  if (slots_.empty()) return std::nullopt;
  const size_t mask = slots_.size() - 1;
  const auto tag = static_cast<uint32_t>(hash);
  for (size_t i = hash & mask;; i = (i + 1) & mask) {
    const Slot& s = slots_[i];
    if (s.id < 0) return std::nullopt;
    if (s.tag == tag && keys[s.id] == key) return s.id;
  }
}

}  // namespace aicloud::engine
