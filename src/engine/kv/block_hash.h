// Block hashes for the KV prefix cache: the identity of a full block of 16 (block_size) tokens is
// a hash over its parent block's hash, its cache scope and its token ids, so equal hashes mean
// "same tokens at the same positions after the same prefix, for the same adapter".
//
//   SipKey key = RandomSipKey();                       // once per process
//   uint64_t h0 = HashBlock(key, kRootBlockHash, scope, tokens.subspan(0, 16));
//   uint64_t h1 = HashBlock(key, h0, scope, tokens.subspan(16, 16));   // chained
//
// Why a keyed hash: blocks are shared across requests and tenants, so a hash collision would hand
// one request another's KV. With an unkeyed hash an attacker can craft colliding prompts (vLLM
// moved its prefix cache from Python's hash() to SHA-256 for this reason). SipHash-2-4
// (Aumasson & Bernstein, "SipHash: a fast short-input PRF", 2012) with a secret per-process key
// makes collisions unpredictable, costs ~100 ns per 64-byte block, and the BlockManager also
// compares the stored tokens, scope and parent hash on every hit (block_manager.h), so even a
// chance collision cannot serve wrong KV for the block that is compared.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace aicloud::engine {

// The 128-bit SipHash key as two little-endian 64-bit halves.
struct SipKey {
  uint64_t k0 = 0;
  uint64_t k1 = 0;
};

// A key from std::random_device: different in every process, so hashes are never persisted or
// compared across processes.
SipKey RandomSipKey();

// Incremental SipHash-2-4 (64-bit output). Feeding bytes in any split gives the same result as
// one call over their concatenation.
class SipHasher {
 public:
  explicit SipHasher(SipKey key);
  void Update(const void* data, size_t len);
  void UpdateU64(uint64_t v);  // 8 bytes, little-endian
  // The hash of everything fed so far. The hasher must not be used afterwards.
  uint64_t Finish();

 private:
  void Compress(uint64_t m);

  uint64_t v0_, v1_, v2_, v3_;
  uint64_t tail_ = 0;    // pending bytes, little-endian
  int tail_len_ = 0;     // 0..7
  uint64_t total_ = 0;   // bytes fed
};

// One-shot SipHash-2-4 of `len` bytes.
uint64_t SipHash24(SipKey key, const void* data, size_t len);

// Which sequences may share KV blocks: only those with equal scopes. The adapter changes every
// layer's K and V, so two adapters (or base and adapter) must never share; `salt` lets the
// server isolate tenants or requests further (vLLM's cache_salt). Adapter ids must not be reused
// for different weights while blocks of the old adapter may still be cached
// (BlockManager::ResetPrefixCache drops them).
struct CacheScope {
  int32_t adapter_id = 0;  // 0 = base model
  uint64_t salt = 0;       // 0 = shared with every request of the same adapter
  bool operator==(const CacheScope&) const = default;
};

// Parent hash of a sequence's first block.
inline constexpr uint64_t kRootBlockHash = 0x6b762d726f6f7400ULL;  // "kv-root"

// Hash of one full block: SipHash over (parent hash, adapter id, salt, block size, token ids).
uint64_t HashBlock(SipKey key, uint64_t parent_hash, CacheScope scope,
                   std::span<const int32_t> tokens);

}  // namespace aicloud::engine
