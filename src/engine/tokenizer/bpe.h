// BpeModel: the byte-level BPE merge loop over raw bytes.
//
//   BpeModel m;
//   m.AddToken("a", 0); m.AddToken("b", 1); m.AddToken("ab", 2);
//   m.AddMerge(0, 1, 2);                       // rank = order of AddMerge calls
//   std::vector<int32_t> ids;
//   m.EncodeWord("abab", &ids);                // {2, 2}
//
// A word starts as one symbol per byte (the token of that single byte); the adjacent pair with
// the lowest merge rank is merged, leftmost first among equals, until no pair has a merge. This
// is the algorithm of GPT-2 and of Hugging Face's BPE model. With `ignore_merges` (Llama-3) a
// word that is itself in the vocabulary maps to that token directly.
//
// Tokens and merges are kept as raw bytes and ids: the tokenizer.json loader converts them from
// the byte-level alphabet once (byte_level.h).
//
// Repeated words are answered from a small per-thread cache (2-way set-associative, 256 KiB,
// shared by all models and tagged with the model's unique id), which keeps the hot words of a
// text in L2 instead of probing the multi-megabyte vocabulary and merge tables each time.
//
// Thread-safety: build on one thread; after that every const method may run concurrently.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "engine/tokenizer/token_index.h"

namespace aicloud::engine {

class BpeModel {
 public:
  BpeModel();
  BpeModel(const BpeModel&) = delete;
  BpeModel& operator=(const BpeModel&) = delete;

  // --- Building. ---
  // Makes room for tokens with ids below `count`.
  void Reserve(size_t count);
  // Adds token `id` with raw bytes `bytes`. Returns false when the bytes are already a token
  // (the id of the first stays).
  bool AddToken(std::string_view bytes, int32_t id);
  // Adds the next merge: (left, right) -> result, with rank = number of merges added before.
  // A pair added twice keeps the later rank, as Hugging Face's loader does.
  void AddMerge(int32_t left, int32_t right, int32_t result);
  void set_ignore_merges(bool v) {
    ignore_merges_ = v;
    Changed();
  }
  // Bytes with no single-byte token are replaced by `unk` (merged into one when `fuse_unk`)
  // or, when unk is unset, dropped — Hugging Face's behaviour without an unk_token.
  void set_unk(std::optional<int32_t> unk, bool fuse_unk) {
    unk_ = unk;
    fuse_unk_ = fuse_unk;
    Changed();
  }

  // --- Queries. ---
  // Appends the tokens of one pre-tokenized word (raw bytes).
  void EncodeWord(std::string_view word, std::vector<int32_t>* out) const;
  // The same without the word cache (for tests of the merge loops).
  void EncodeWordUncached(std::string_view word, std::vector<int32_t>* out) const;
  std::optional<int32_t> FindBytes(std::string_view bytes) const;
  size_t merge_count() const { return merges_.size(); }
  // The bytes that have no single-byte token (each would be dropped or become unk).
  std::vector<unsigned char> MissingBytes() const;

 private:
  struct MergeValue {
    int32_t rank;
    int32_t result;
  };
  // Open-addressing hash map from a token pair to its merge: the hot lookup of the merge loop.
  class MergeTable {
   public:
    void Insert(int32_t left, int32_t right, MergeValue value);
    const MergeValue* Find(int32_t left, int32_t right) const;
    size_t size() const { return size_; }

   private:
    static constexpr uint64_t kEmpty = ~uint64_t{0};  // ids are below 2^31: never a key
    static uint64_t Key(int32_t l, int32_t r) {
      return (uint64_t(uint32_t(l)) << 32) | uint32_t(r);
    }
    static uint64_t Hash(uint64_t k) {  // MurmurHash3's 64-bit finalizer
      k ^= k >> 33;
      k *= 0xFF51AFD7ED558CCDULL;
      k ^= k >> 33;
      k *= 0xC4CEB9FE1A85EC53ULL;
      return k ^ (k >> 33);
    }
    void Grow();

    struct Slot {
      uint64_t key = kEmpty;
      MergeValue value{};
    };
    std::vector<Slot> slots_;
    size_t size_ = 0;
  };
  void Encode(std::string_view word, uint64_t hash, std::vector<int32_t>* out) const;
  // Gives the model a new cache tag, so words cached before a change are not reused.
  void Changed();

  // Merge loops for short words (pair ranks in an array, linear scan for the minimum) and for
  // long ones (linked symbols and a heap), with identical results.
  void MergeSmall(std::vector<int32_t>* symbols) const;
  void MergeLarge(std::vector<int32_t>* symbols) const;

  uint32_t cache_owner_;  // unique per model and version: tags its entries in the word cache
  std::vector<std::string> bytes_;  // by id; empty for ids with no token
  TokenIndex index_;                // bytes -> id
  int32_t byte_token_[256];
  MergeTable merges_;
  int32_t next_rank_ = 0;
  bool ignore_merges_ = false;
  std::optional<int32_t> unk_;
  bool fuse_unk_ = false;
};

}  // namespace aicloud::engine
