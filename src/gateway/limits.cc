#include "gateway/limits.h"

#include <algorithm>
#include <cmath>

namespace aicloud::gateway {

void RateLimiter::Refill(Bucket& b, int64_t limit, int64_t now_us) {
  const double cap = static_cast<double>(limit);
  if (!b.init) {
    b.level = cap;
    b.init = true;
  } else {
    b.level = std::min(cap, b.level + cap / 60e6 * static_cast<double>(std::max<int64_t>(0, now_us - b.at_us)));
  }
  b.at_us = now_us;
  b.limit = limit;
}

void RateLimiter::DebitBucket(std::unordered_map<std::string, Bucket>& buckets, const std::string& name,
                              double amount, int64_t limit, int64_t now_us) {
  auto it = buckets.find(name);
  if (it == buckets.end() || !it->second.init) {
    if (limit <= 0) return;  // nothing to take from: the scope has no such limit
    it = buckets.try_emplace(name).first;
    Refill(it->second, limit, now_us);  // full, at the other gateway's limit until one applies here
  } else {
    Refill(it->second, it->second.limit, now_us);
  }
  Bucket& b = it->second;
  const double cap = static_cast<double>(b.limit);
  b.level = std::clamp(b.level - amount, -kMaxDebt * cap, cap);
}

RateVerdict RateLimiter::Admit(std::span<const LimitScope> scopes, int64_t tokens) {
  const int64_t now = clock_->NowMicros();
  std::lock_guard<std::mutex> lock(mu_);
  // Check every bucket first, then take from all: all or nothing.
  for (const LimitScope& s : scopes) {
    const Limits& l = *s.limits;
    if (l.rpm > 0) {
      Bucket& b = rpm_[s.name];
      Refill(b, l.rpm, now);
      if (b.level < 1) {
        const double wait_s = (1 - b.level) * 60.0 / static_cast<double>(l.rpm);
        return {false, "rate limit: " + s.name + " allows " + std::to_string(l.rpm) + " requests per minute",
                std::max(1, static_cast<int>(std::ceil(wait_s)))};
      }
    }
    if (l.tpm > 0) {
      if (tokens > l.tpm) {
        return {false, "rate limit: this request may use up to " + std::to_string(tokens) + " tokens (prompt + max_tokens), more than " +
                           s.name + " allows per minute (" + std::to_string(l.tpm) + "); lower max_tokens",
                60};
      }
      Bucket& b = tpm_[s.name];
      Refill(b, l.tpm, now);
      if (b.level < static_cast<double>(tokens)) {
        const double wait_s = (static_cast<double>(tokens) - b.level) * 60.0 / static_cast<double>(l.tpm);
        return {false, "rate limit: " + s.name + " allows " + std::to_string(l.tpm) + " tokens per minute",
                std::max(1, static_cast<int>(std::ceil(wait_s)))};
      }
    }
  }
  for (const LimitScope& s : scopes) {
    if (s.limits->rpm > 0) {
      Bucket& b = rpm_[s.name];
      b.level -= 1;
      b.taken += 1;
      b.touched_us = now;
    }
    if (s.limits->tpm > 0) {
      Bucket& b = tpm_[s.name];
      b.level -= static_cast<double>(tokens);
      b.taken += static_cast<double>(tokens);
      b.touched_us = now;
    }
  }
  return {};
}

void RateLimiter::Adjust(std::span<const LimitScope> scopes, int64_t delta) {
  if (delta == 0) return;
  const int64_t now = clock_->NowMicros();
  std::lock_guard<std::mutex> lock(mu_);
  for (const LimitScope& s : scopes) {
    if (s.limits->tpm <= 0) continue;
    Bucket& b = tpm_[s.name];
    Refill(b, s.limits->tpm, now);
    b.level = std::min(static_cast<double>(s.limits->tpm), b.level + static_cast<double>(delta));
    b.taken -= static_cast<double>(delta);
    b.touched_us = now;
  }
}

void RateLimiter::Release(std::span<const LimitScope> scopes, int64_t tokens) {
  const int64_t now = clock_->NowMicros();
  std::lock_guard<std::mutex> lock(mu_);
  for (const LimitScope& s : scopes) {
    if (s.limits->rpm > 0) {
      Bucket& b = rpm_[s.name];
      Refill(b, s.limits->rpm, now);
      b.level = std::min(static_cast<double>(s.limits->rpm), b.level + 1);
      b.taken -= 1;
      b.touched_us = now;
    }
    if (s.limits->tpm > 0) {
      Bucket& b = tpm_[s.name];
      Refill(b, s.limits->tpm, now);
      b.level = std::min(static_cast<double>(s.limits->tpm), b.level + static_cast<double>(tokens));
      b.taken -= static_cast<double>(tokens);
      b.touched_us = now;
    }
  }
}

std::unordered_map<std::string, RateTotals> RateLimiter::Totals(int64_t window_us) const {
  const int64_t since = clock_->NowMicros() - window_us;
  std::unordered_map<std::string, RateTotals> out;
  std::lock_guard<std::mutex> lock(mu_);
  // A scope is in when either of its buckets moved within the window; then both totals are.
  for (const auto* buckets : {&rpm_, &tpm_}) {
    for (const auto& [name, b] : *buckets) {
      if (b.touched_us >= 0 && b.touched_us >= since) out.try_emplace(name);
    }
  }
  for (auto& [name, t] : out) {
    if (auto it = rpm_.find(name); it != rpm_.end() && it->second.touched_us >= 0) {
      t.requests = it->second.taken;
      t.rpm = it->second.limit;
    }
    if (auto it = tpm_.find(name); it != tpm_.end() && it->second.touched_us >= 0) {
      t.tokens = it->second.taken;
      t.tpm = it->second.limit;
    }
  }
  return out;
}

void RateLimiter::Debit(const std::string& scope, const RateTotals& taken) {
  if (!std::isfinite(taken.requests) || !std::isfinite(taken.tokens)) return;
  const int64_t now = clock_->NowMicros();
  std::lock_guard<std::mutex> lock(mu_);
  if (taken.requests != 0) DebitBucket(rpm_, scope, taken.requests, taken.rpm, now);
  if (taken.tokens != 0) DebitBucket(tpm_, scope, taken.tokens, taken.tpm, now);
}

std::vector<std::string> RateLimiter::Prune(int64_t idle_us) {
  const int64_t now = clock_->NowMicros();
  std::lock_guard<std::mutex> lock(mu_);
  // A bucket may go when this limiter has not used it for `idle_us` and it has refilled to its
  // limit: a bucket made again later starts full, as this one would answer.
  auto idle_and_full = [&](std::unordered_map<std::string, Bucket>& buckets, const std::string& name) {
    auto it = buckets.find(name);
    if (it == buckets.end()) return true;
    Bucket& b = it->second;
    if (b.touched_us >= 0 && b.touched_us > now - idle_us) return false;
    if (!b.init) return true;
    Refill(b, b.limit, now);
    return b.level >= static_cast<double>(b.limit);
  };
  std::vector<std::string> candidates;  // every scope once
  for (const auto& [name, b] : rpm_) candidates.push_back(name);
  for (const auto& [name, b] : tpm_) {
    if (!rpm_.contains(name)) candidates.push_back(name);
  }
  std::vector<std::string> dropped;
  for (const std::string& name : candidates) {
    if (idle_and_full(rpm_, name) && idle_and_full(tpm_, name)) {
      rpm_.erase(name);
      tpm_.erase(name);
      dropped.push_back(name);
    }
  }
  return dropped;
}

size_t RateLimiter::Scopes() const {
  std::lock_guard<std::mutex> lock(mu_);
  size_t n = rpm_.size();
  for (const auto& [name, b] : tpm_) n += rpm_.contains(name) ? 0 : 1;
  return n;
}

}  // namespace aicloud::gateway
