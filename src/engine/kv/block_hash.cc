#include "engine/kv/block_hash.h"

#include <cstring>
#include <random>

namespace aicloud::engine {
namespace {

inline uint64_t Rotl(uint64_t x, int b) { return (x << b) | (x >> (64 - b)); }

inline void SipRound(uint64_t& v0, uint64_t& v1, uint64_t& v2, uint64_t& v3) {
  v0 += v1; v1 = Rotl(v1, 13); v1 ^= v0; v0 = Rotl(v0, 32);
  v2 += v3; v3 = Rotl(v3, 16); v3 ^= v2;
  v0 += v3; v3 = Rotl(v3, 21); v3 ^= v0;
  v2 += v1; v1 = Rotl(v1, 17); v1 ^= v2; v2 = Rotl(v2, 32);
}

}  // namespace

SipKey RandomSipKey() {
  std::random_device rd;
  auto word = [&rd] { return (static_cast<uint64_t>(rd()) << 32) ^ rd(); };
  SipKey k;
  k.k0 = word();
  k.k1 = word();
  return k;
}

SipHasher::SipHasher(SipKey key)
    : v0_(key.k0 ^ 0x736f6d6570736575ULL),
      v1_(key.k1 ^ 0x646f72616e646f6dULL),
      v2_(key.k0 ^ 0x6c7967656e657261ULL),
      v3_(key.k1 ^ 0x7465646279746573ULL) {}

void SipHasher::Compress(uint64_t m) {
  v3_ ^= m;
  SipRound(v0_, v1_, v2_, v3_);
  SipRound(v0_, v1_, v2_, v3_);
  v0_ ^= m;
}

void SipHasher::Update(const void* data, size_t len) {
  const auto* p = static_cast<const unsigned char*>(data);
  total_ += len;
  // Top up a partial word first.
  while (len > 0 && tail_len_ > 0) {
    tail_ |= static_cast<uint64_t>(*p++) << (8 * tail_len_);
    --len;
    if (++tail_len_ == 8) {
      Compress(tail_);
      tail_ = 0;
      tail_len_ = 0;
    }
  }
  for (; len >= 8; len -= 8, p += 8) {
    uint64_t m = 0;
    for (int i = 0; i < 8; ++i) m |= static_cast<uint64_t>(p[i]) << (8 * i);
    Compress(m);
  }
  for (; len > 0; --len) tail_ |= static_cast<uint64_t>(*p++) << (8 * tail_len_++);
}

void SipHasher::UpdateU64(uint64_t v) {
  if (tail_len_ == 0) {
    total_ += 8;
    Compress(v);
    return;
  }
  unsigned char b[8];
  for (int i = 0; i < 8; ++i) b[i] = static_cast<unsigned char>(v >> (8 * i));
  Update(b, 8);
}

uint64_t SipHasher::Finish() {
  const uint64_t last = tail_ | (total_ << 56);
  Compress(last);
  v2_ ^= 0xff;
  for (int i = 0; i < 4; ++i) SipRound(v0_, v1_, v2_, v3_);
  return v0_ ^ v1_ ^ v2_ ^ v3_;
}

uint64_t SipHash24(SipKey key, const void* data, size_t len) {
  SipHasher h(key);
  h.Update(data, len);
  return h.Finish();
}

uint64_t HashBlock(SipKey key, uint64_t parent_hash, CacheScope scope,
                   std::span<const int32_t> tokens) {
  SipHasher h(key);
  h.UpdateU64(parent_hash);
  h.UpdateU64(static_cast<uint32_t>(scope.adapter_id));
  h.UpdateU64(scope.salt);
  h.UpdateU64(tokens.size());
  // Two token ids per word keeps the hot loop on the word path.
  size_t i = 0;
  for (; i + 2 <= tokens.size(); i += 2) {
    h.UpdateU64(static_cast<uint64_t>(static_cast<uint32_t>(tokens[i])) |
                (static_cast<uint64_t>(static_cast<uint32_t>(tokens[i + 1])) << 32));
  }
  if (i < tokens.size()) h.UpdateU64(static_cast<uint32_t>(tokens[i]));
  return h.Finish();
}

}  // namespace aicloud::engine
