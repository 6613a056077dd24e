// Sha256Hex, HmacSha256Hex, RandomHex and the internal helpers of util.h.
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include <cstdio>
#include <ctime>
#include <nlohmann/json.hpp>
#include <vector>

#include "auth/auth.h"
#include "auth/util.h"

namespace aicloud::auth {
namespace {

std::string ToHex(const unsigned char* data, size_t n) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out(2 * n, '0');
  for (size_t i = 0; i < n; ++i) {
    out[2 * i] = kDigits[data[i] >> 4];
    out[2 * i + 1] = kDigits[data[i] & 0xF];
  }
  return out;
}

}  // namespace

std::optional<Sha256Digest> Sha256(std::string_view data) {
  // Fetched once: EVP_sha256() makes every digest look the implementation up again (a lock and a
  // table search, more than hashing an API key costs). Held for the process's life, as is each
  // thread's context (EVP_Digest would allocate and free one per call).
  static EVP_MD* const sha256 = EVP_MD_fetch(nullptr, "SHA256", nullptr);
  struct Ctx {
    EVP_MD_CTX* ctx = EVP_MD_CTX_new();
    ~Ctx() { EVP_MD_CTX_free(ctx); }
  };
  thread_local Ctx t;
  Sha256Digest digest;
  unsigned int len = 0;
  if (sha256 == nullptr || t.ctx == nullptr || EVP_DigestInit_ex2(t.ctx, sha256, nullptr) != 1 ||
      EVP_DigestUpdate(t.ctx, data.data(), data.size()) != 1 || EVP_DigestFinal_ex(t.ctx, digest.data(), &len) != 1 ||
      len != digest.size()) {
    return std::nullopt;  // cannot happen with the default provider
  }
  return digest;
}

std::string Sha256Hex(std::string_view data) {
  std::optional<Sha256Digest> d = Sha256(data);
  if (!d) return "";  // "" never matches a stored hash
  return ToHex(d->data(), d->size());
}

std::string HmacSha256Hex(std::string_view key, std::string_view data) {
  unsigned char mac[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()), reinterpret_cast<const unsigned char*>(data.data()),
           data.size(), mac, &len) == nullptr) {
    return "";
  }
  return ToHex(mac, len);
}

std::string RandomHex(size_t bytes) {
  std::vector<unsigned char> buf(bytes);
  if (bytes > 0 && RAND_bytes(buf.data(), static_cast<int>(bytes)) != 1) return "";
  return ToHex(buf.data(), bytes);
}

namespace internal {

std::string FormatRfc3339(std::chrono::system_clock::time_point t, bool with_ms) {
  using namespace std::chrono;
  int64_t ms = duration_cast<milliseconds>(t.time_since_epoch()).count();
  int64_t secs = ms >= 0 ? ms / 1000 : (ms - 999) / 1000;
  int frac = static_cast<int>(ms - secs * 1000);
  std::time_t tt = static_cast<std::time_t>(secs);
  std::tm tm{};
  gmtime_r(&tt, &tm);
  char buf[40];
  size_t n = std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%S", &tm);
  std::string out(buf, n);
  if (with_ms) {
    char f[8];
    std::snprintf(f, sizeof(f), ".%03d", frac);
    out += f;
  }
  out += 'Z';
  return out;
}

std::optional<std::chrono::system_clock::time_point> ParseRfc3339(std::string_view s) {
  auto digits = [&](size_t pos, size_t n, int* out) {
    if (pos + n > s.size()) return false;
    int v = 0;
    for (size_t i = pos; i < pos + n; ++i) {
      if (s[i] < '0' || s[i] > '9') return false;
      v = v * 10 + (s[i] - '0');
    }
    *out = v;
    return true;
  };
  int year, mon, day, hour, min, sec;
  if (!digits(0, 4, &year) || s.size() < 19 || s[4] != '-' || !digits(5, 2, &mon) ||
      s[7] != '-' || !digits(8, 2, &day) || (s[10] != 'T' && s[10] != 't' && s[10] != ' ') ||
      !digits(11, 2, &hour) || s[13] != ':' || !digits(14, 2, &min) || s[16] != ':' ||
      !digits(17, 2, &sec)) {
    return std::nullopt;
  }
  if (mon < 1 || mon > 12 || day < 1 || day > 31 || hour > 23 || min > 59 || sec > 60) {
    return std::nullopt;
  }
  size_t pos = 19;
  int64_t micros = 0;
  if (pos < s.size() && s[pos] == '.') {
    ++pos;
    size_t start = pos;
    int64_t scale = 100000;
    while (pos < s.size() && s[pos] >= '0' && s[pos] <= '9') {
      micros += (s[pos] - '0') * scale;
      scale /= 10;
      ++pos;
    }
    if (pos == start) return std::nullopt;
  }
  int64_t offset_secs = 0;
  if (pos < s.size() && (s[pos] == 'Z' || s[pos] == 'z')) {
    ++pos;
  } else if (pos < s.size() && (s[pos] == '+' || s[pos] == '-')) {
    int oh, om;
    if (!digits(pos + 1, 2, &oh) || pos + 3 >= s.size() || s[pos + 3] != ':' ||
        !digits(pos + 4, 2, &om) || oh > 23 || om > 59) {
      return std::nullopt;
    }
    offset_secs = (oh * 3600 + om * 60) * (s[pos] == '-' ? -1 : 1);
    pos += 6;
  } else {
    return std::nullopt;
  }
  if (pos != s.size()) return std::nullopt;
  std::tm tm{};
  tm.tm_year = year - 1900;
  tm.tm_mon = mon - 1;
  tm.tm_mday = day;
  tm.tm_hour = hour;
  tm.tm_min = min;
  tm.tm_sec = sec;
  int64_t epoch = static_cast<int64_t>(timegm(&tm)) - offset_secs;
  return std::chrono::system_clock::time_point(
      std::chrono::duration_cast<std::chrono::system_clock::duration>(
          std::chrono::microseconds(epoch * 1'000'000 + micros)));
}

std::string SanitizeUtf8(std::string_view s) {
  bool ascii = true;
  for (char c : s) {
    if (static_cast<unsigned char>(c) >= 0x80) {
      ascii = false;
      break;
    }
  }
  if (ascii) return std::string(s);
  nlohmann::json j = std::string(s);
  return nlohmann::json::parse(j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace))
      .get<std::string>();
}

}  // namespace internal

bool ConstantTimeEquals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  if (a.empty()) return true;
  return CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}
}  // namespace aicloud::auth
