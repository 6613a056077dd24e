// TokenIndex: finds a token id by its text in a vocabulary kept elsewhere as a vector of strings
// indexed by id.
//
//   std::vector<std::string> text = {"a", "b", "ab"};
//   TokenIndex index;
//   for (int32_t id = 0; id < 3; ++id) index.Insert(text, id);
//   std::optional<int32_t> ab = index.Find(text, "ab");   // 2
//
// Open addressing with linear probing over 8-byte slots (hash tag + id), so a lookup touches one
// slot and the key string. Vocabulary lookups run once per word during encoding and three times
// per merge while loading, which is why this is not a node-based std::unordered_map.
//
// The strings are passed to every call rather than kept, so the owner stays freely movable.
// Thread-safety: Find is const and may run concurrently; Insert needs exclusive access.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace aicloud::engine {

class TokenIndex {
 public:
  static uint64_t Hash(std::string_view s) { return std::hash<std::string_view>{}(s); }

  // Makes room for `count` tokens without rehashing.
  void Reserve(size_t count);
  // Indexes token `id`, whose text is keys[id]. Returns false (and changes nothing) when a
  // token with the same text is already indexed.
  bool Insert(const std::vector<std::string>& keys, int32_t id);
  std::optional<int32_t> Find(const std::vector<std::string>& keys, std::string_view key) const {
    return Find(keys, key, Hash(key));
  }
  // With the key's Hash() already computed.
  std::optional<int32_t> Find(const std::vector<std::string>& keys, std::string_view key,
                              uint64_t hash) const;
  size_t size() const { return size_; }

 private:
  struct Slot {
    uint32_t tag;  // low 32 bits of the hash
    int32_t id;    // -1: empty
  };
  std::vector<Slot> slots_;
  size_t size_ = 0;
};

}  // namespace aicloud::engine
