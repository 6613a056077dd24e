#include "engine/tokenizer/bpe.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <climits>
#include <cstring>
#include <memory>
#include <queue>

namespace aicloud::engine {
namespace {

// Words up to this many symbols use the array merge loop; longer ones the heap. Most words of
// natural text are far shorter; long runs (whitespace, digits in GPT-2, base64) take the heap.
constexpr size_t kSmallWord = 48;

// The per-thread word cache: one cache line per entry, two-way set-associative with the most
// recently used entry first (on 512 KiB of prose and code that hits 90% of words where a
// direct-mapped table of the same size hits 88%). Words longer than kCacheMaxWord bytes or of
// more than kCacheMaxIds tokens are not cached.
constexpr size_t kCacheSets = 2048;
constexpr size_t kCacheWays = 2;
constexpr size_t kCacheMaxWord = 22;
constexpr size_t kCacheMaxIds = 8;

struct alignas(64) CacheEntry {
  uint32_t owner = 0;  // 0: empty
  uint32_t hash = 0;
  uint8_t word_size = 0;
  uint8_t id_count = 0;
  char word[kCacheMaxWord];
  int32_t ids[kCacheMaxIds];
};
static_assert(sizeof(CacheEntry) == 64);

CacheEntry* WordCache() {
  thread_local std::unique_ptr<CacheEntry[]> cache(new CacheEntry[kCacheSets * kCacheWays]);
  return cache.get();
}

uint32_t NextCacheOwner() {
  static std::atomic<uint32_t> next{1};
  uint32_t owner = next.fetch_add(1, std::memory_order_relaxed);
  if (owner == 0) owner = next.fetch_add(1, std::memory_order_relaxed);  // after wrap-around
  return owner;
}

}  // namespace

void BpeModel::MergeTable::Insert(int32_t left, int32_t right, MergeValue value) {
  if ((size_ + 1) * 2 > slots_.size()) Grow();
  const uint64_t key = Key(left, right);
  const size_t mask = slots_.size() - 1;
  for (size_t i = Hash(key) & mask;; i = (i + 1) & mask) {
    if (slots_[i].key == key) {
      slots_[i].value = value;
      return;
    }
    if (slots_[i].key == kEmpty) {
      slots_[i] = {key, value};
      ++size_;
      return;
    }
  }
}

const BpeModel::MergeValue* BpeModel::MergeTable::Find(int32_t left, int32_t right) const {
  if (slots_.empty()) return nullptr;
  const uint64_t key = Key(left, right);
  const size_t mask = slots_.size() - 1;
  for (size_t i = Hash(key) & mask;; i = (i + 1) & mask) {
    if (slots_[i].key == key) return &slots_[i].value;
    if (slots_[i].key == kEmpty) return nullptr;
  }
}

void BpeModel::MergeTable::Grow() {
  std::vector<Slot> old = std::move(slots_);
  slots_.assign(std::max<size_t>(16, old.size() * 2), Slot{});
  size_ = 0;
  for (const Slot& s : old) {
    if (s.key != kEmpty) Insert(int32_t(s.key >> 32), int32_t(s.key & 0xFFFFFFFF), s.value);
  }
}

BpeModel::BpeModel() : cache_owner_(NextCacheOwner()) { std::fill(std::begin(byte_token_), std::end(byte_token_), -1); }

void BpeModel::Changed() { cache_owner_ = NextCacheOwner(); }

void BpeModel::Reserve(size_t count) {
  if (count > bytes_.size()) bytes_.resize(count);
  index_.Reserve(count);
}

bool BpeModel::AddToken(std::string_view bytes, int32_t id) {
  if (index_.Find(bytes_, bytes)) return false;
  if (static_cast<size_t>(id) >= bytes_.size()) bytes_.resize(id + 1);
  bytes_[id].assign(bytes);
  index_.Insert(bytes_, id);
  if (bytes.size() == 1) byte_token_[static_cast<unsigned char>(bytes[0])] = id;
  Changed();
  return true;
}

void BpeModel::AddMerge(int32_t left, int32_t right, int32_t result) {
  merges_.Insert(left, right, {next_rank_++, result});
  Changed();
}

std::optional<int32_t> BpeModel::FindBytes(std::string_view bytes) const {
  return index_.Find(bytes_, bytes);
}

std::vector<unsigned char> BpeModel::MissingBytes() const {
  std::vector<unsigned char> missing;
  for (int b = 0; b < 256; ++b) {
    if (byte_token_[b] < 0) missing.push_back(static_cast<unsigned char>(b));
  }
  return missing;
}

void BpeModel::EncodeWord(std::string_view word, std::vector<int32_t>* out) const {
  if (word.size() <= 1 || word.size() > kCacheMaxWord) {
    EncodeWordUncached(word, out);
    return;
  }
  const uint64_t hash = TokenIndex::Hash(word);
  CacheEntry* set = WordCache() + ((hash >> 20) % kCacheSets) * kCacheWays;
  auto matches = [&](const CacheEntry& e) {
    return e.owner == cache_owner_ && e.hash == static_cast<uint32_t>(hash) &&
           e.word_size == word.size() && std::memcmp(e.word, word.data(), word.size()) == 0;
  };
  if (matches(set[0])) {
    out->insert(out->end(), set[0].ids, set[0].ids + set[0].id_count);
    return;
  }
  if (matches(set[1])) {
    std::swap(set[0], set[1]);
    out->insert(out->end(), set[0].ids, set[0].ids + set[0].id_count);
    return;
  }
  const size_t first = out->size();
  Encode(word, hash, out);
  const size_t count = out->size() - first;
  if (count <= kCacheMaxIds) {
    set[1] = set[0];  // the older entry is evicted
    CacheEntry& e = set[0];
    e.owner = cache_owner_;
    e.hash = static_cast<uint32_t>(hash);
    e.word_size = static_cast<uint8_t>(word.size());
    e.id_count = static_cast<uint8_t>(count);
    std::memcpy(e.word, word.data(), word.size());
    std::copy(out->begin() + static_cast<ptrdiff_t>(first), out->end(), e.ids);
  }
}

void BpeModel::EncodeWordUncached(std::string_view word, std::vector<int32_t>* out) const {
  if (word.empty()) return;
  Encode(word, word.size() > 1 && ignore_merges_ ? TokenIndex::Hash(word) : 0, out);
}

void BpeModel::Encode(std::string_view word, uint64_t hash, std::vector<int32_t>* out) const {
  if (ignore_merges_ && word.size() > 1) {
    if (std::optional<int32_t> id = index_.Find(bytes_, word, hash)) {
      out->push_back(*id);
      return;
    }
  }
  thread_local std::vector<int32_t> symbols;
  symbols.clear();
  bool last_was_unk = false;
  for (char c : word) {
    int32_t id = byte_token_[static_cast<unsigned char>(c)];
    if (id < 0) {
      if (!unk_ || (fuse_unk_ && last_was_unk)) continue;
      id = *unk_;
      last_was_unk = true;
    } else {
      last_was_unk = false;
    }
    symbols.push_back(id);
  }
  if (symbols.size() > 1) {
    if (symbols.size() <= kSmallWord) {
      MergeSmall(&symbols);
    } else {
      MergeLarge(&symbols);
    }
  }
  out->insert(out->end(), symbols.begin(), symbols.end());
}

void BpeModel::MergeSmall(std::vector<int32_t>* symbols) const {
  int32_t* s = symbols->data();
  size_t n = symbols->size();
  std::array<int32_t, kSmallWord> rank;
  std::array<int32_t, kSmallWord> result;
  auto look = [&](size_t i) {
    const MergeValue* m = merges_.Find(s[i], s[i + 1]);
    rank[i] = m ? m->rank : INT32_MAX;
    result[i] = m ? m->result : -1;
  };
  for (size_t i = 0; i + 1 < n; ++i) look(i);
  while (n > 1) {
    size_t best = 0;
    for (size_t i = 1; i + 1 < n; ++i) {
      if (rank[i] < rank[best]) best = i;
    }
    if (rank[best] == INT32_MAX) break;
    s[best] = result[best];
    // Drop symbol best+1 and pair best; pairs best-1 and best change.
    for (size_t i = best + 1; i + 1 < n; ++i) s[i] = s[i + 1];
    for (size_t i = best; i + 2 < n; ++i) {
      rank[i] = rank[i + 1];
      result[i] = result[i + 1];
    }
    --n;
    if (best > 0) look(best - 1);
    if (best + 1 < n) look(best);
  }
  symbols->resize(n);
}

void BpeModel::MergeLarge(std::vector<int32_t>* symbols) const {
  struct Symbol {
    int32_t id;
    int32_t prev;
    int32_t next;
  };
  struct Candidate {
    int32_t rank;
    int32_t pos;  // index of the left symbol
    int32_t left;
    int32_t right;
    int32_t result;
    bool operator>(const Candidate& o) const {
      return rank != o.rank ? rank > o.rank : pos > o.pos;
    }
  };
  const auto n = static_cast<int32_t>(symbols->size());
  std::vector<Symbol> sym(n);
  for (int32_t i = 0; i < n; ++i) sym[i] = {(*symbols)[i], i - 1, i + 1 < n ? i + 1 : -1};
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> heap;
  auto push = [&](int32_t pos) {
    const int32_t next = sym[pos].next;
    if (next < 0) return;
    if (const MergeValue* m = merges_.Find(sym[pos].id, sym[next].id)) {
      heap.push({m->rank, pos, sym[pos].id, sym[next].id, m->result});
    }
  };
  for (int32_t i = 0; i + 1 < n; ++i) push(i);
  while (!heap.empty()) {
    const Candidate c = heap.top();
    heap.pop();
    // Stale when either side has changed since the candidate was pushed.
    if (sym[c.pos].id != c.left) continue;
    const int32_t right = sym[c.pos].next;
    if (right < 0 || sym[right].id != c.right) continue;
    sym[c.pos].id = c.result;
    sym[c.pos].next = sym[right].next;
    if (sym[right].next >= 0) sym[sym[right].next].prev = c.pos;
    sym[right].id = -1;
    if (sym[c.pos].prev >= 0) push(sym[c.pos].prev);
    push(c.pos);
  }
  symbols->clear();
  for (int32_t i = 0; i >= 0; i = sym[i].next) symbols->push_back(sym[i].id);
}

}  // namespace aicloud::engine
