// SipHash-2-4 against the reference vectors of the SipHash paper (key 00..0f, message 00..n-1),
// incremental feeding, and what HashBlock must be sensitive to.
#include "engine/kv/block_hash.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <numeric>
#include <vector>

namespace aicloud::engine {
namespace {

constexpr SipKey kRefKey{0x0706050403020100ULL, 0x0f0e0d0c0b0a0908ULL};

TEST(SipHashTest, ReferenceVectors) {
  struct Case {
    size_t len;
    uint64_t want;
  };
  const Case cases[] = {
      {0, 0x726fdb47dd0e0e31ULL},  {1, 0x74f839c593dc67fdULL},  {2, 0x0d6c8009d9a94f5aULL},
      {3, 0x85676696d7fb7e2dULL},  {4, 0xcf2794e0277187b7ULL},  {8, 0x93f5f5799a932462ULL},
      {15, 0xa129ca6149be45e5ULL}, {16, 0x3f2acc7f57c29bdbULL},
  };
  unsigned char msg[16];
  std::iota(msg, msg + 16, 0);
  for (const Case& c : cases) {
    EXPECT_EQ(SipHash24(kRefKey, msg, c.len), c.want) << "len " << c.len;
  }
}

TEST(SipHashTest, IncrementalEqualsOneShot) {
  unsigned char msg[64];
  std::iota(msg, msg + 64, 7);
  const uint64_t whole = SipHash24(kRefKey, msg, sizeof msg);
  for (size_t a = 0; a <= 64; a += 3) {
    for (size_t b = a; b <= 64; b += 5) {
      SipHasher h(kRefKey);
      h.Update(msg, a);
      h.Update(msg + a, b - a);
      h.Update(msg + b, 64 - b);
      EXPECT_EQ(h.Finish(), whole) << a << " " << b;
    }
  }
  // UpdateU64 after an odd number of bytes takes the byte path and still agrees.
  SipHasher h(kRefKey);
  h.Update(msg, 3);
  uint64_t w = 0;
  for (int i = 0; i < 8; ++i) w |= static_cast<uint64_t>(msg[3 + i]) << (8 * i);
  h.UpdateU64(w);
  h.Update(msg + 11, 64 - 11);
  EXPECT_EQ(h.Finish(), whole);
}

TEST(BlockHashTest, SensitiveToEveryInput) {
  std::vector<int32_t> tokens(16);
  std::iota(tokens.begin(), tokens.end(), 100);
  const CacheScope base{0, 0};
  const uint64_t h = HashBlock(kRefKey, kRootBlockHash, base, tokens);
  EXPECT_EQ(h, HashBlock(kRefKey, kRootBlockHash, base, tokens));  // deterministic

  std::vector<int32_t> other = tokens;
  other[15] += 1;
  EXPECT_NE(h, HashBlock(kRefKey, kRootBlockHash, base, other));
  std::swap(other[0], other[1]);  // order matters too
  EXPECT_NE(h, HashBlock(kRefKey, kRootBlockHash, base, other));
  EXPECT_NE(h, HashBlock(kRefKey, 12345, base, tokens));
  EXPECT_NE(h, HashBlock(kRefKey, kRootBlockHash, CacheScope{1, 0}, tokens));
  EXPECT_NE(h, HashBlock(kRefKey, kRootBlockHash, CacheScope{0, 1}, tokens));
  EXPECT_NE(h, HashBlock(SipKey{1, 2}, kRootBlockHash, base, tokens));
  // A shorter block is a different block even if its tokens are a prefix.
  EXPECT_NE(h, HashBlock(kRefKey, kRootBlockHash, base, std::span(tokens).first(15)));
}

TEST(BlockHashTest, RandomKeysDiffer) {
  const SipKey a = RandomSipKey();
  const SipKey b = RandomSipKey();
  EXPECT_FALSE(a.k0 == b.k0 && a.k1 == b.k1);
}

}  // namespace
}  // namespace aicloud::engine
