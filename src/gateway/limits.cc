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

RateLimiter::ScopeBuckets& RateLimiter::BucketsLocked(std::string_view name) {
  auto it = scopes_.find(name);
  if (it == scopes_.end()) it = scopes_.try_emplace(std::string(name)).first;
  return it->second;
}

void RateLimiter::DebitBucket(Bucket& b, double amount, int64_t limit, int64_t now_us) {
  if (!b.init) {
    if (limit <= 0) return;  // nothing to take from: the scope has no such limit
    Refill(b, limit, now_us);  // full, at the other gateway's limit until one applies here
  } else {
    Refill(b, b.limit, now_us);
  }
  const double cap = static_cast<double>(b.limit);
  b.level = std::clamp(b.level - amount, -kMaxDebt * cap, cap);
}

RateVerdict RateLimiter::Admit(std::span<const LimitScope> scopes, int64_t tokens) {
  const int64_t now = clock_->NowMicros();
  std::lock_guard<std::mutex> lock(mu_);
  // Check every bucket first, then take from all: all or nothing. Each scope is looked up once
  // (a request has two: its key and its tenant); references into the map stay valid meanwhile.
  constexpr size_t kKept = 4;
  ScopeBuckets* found[kKept] = {};
  for (size_t i = 0; i < scopes.size(); ++i) {
    const LimitScope& s = scopes[i];
    const Limits& l = *s.limits;
    if (l.rpm <= 0 && l.tpm <= 0) continue;
    ScopeBuckets& sb = BucketsLocked(s.name);
    if (i < kKept) found[i] = &sb;
    if (l.rpm > 0) {
      Bucket& b = sb.rpm;
      Refill(b, l.rpm, now);
      if (b.level < 1) {
        const double wait_s = (1 - b.level) * 60.0 / static_cast<double>(l.rpm);
        return {false, "rate limit: " + std::string(s.name) + " allows " + std::to_string(l.rpm) + " requests per minute",
                std::max(1, static_cast<int>(std::ceil(wait_s)))};
      }
    }
    if (l.tpm > 0) {
      if (tokens > l.tpm) {
        return {false, "rate limit: this request may use up to " + std::to_string(tokens) + " tokens (prompt + max_tokens), more than " +
                           std::string(s.name) + " allows per minute (" + std::to_string(l.tpm) + "); lower max_tokens",
                60};
      }
      Bucket& b = sb.tpm;
      Refill(b, l.tpm, now);
      if (b.level < static_cast<double>(tokens)) {
        const double wait_s = (static_cast<double>(tokens) - b.level) * 60.0 / static_cast<double>(l.tpm);
        return {false, "rate limit: " + std::string(s.name) + " allows " + std::to_string(l.tpm) + " tokens per minute",
                std::max(1, static_cast<int>(std::ceil(wait_s)))};
      }
    }
  }
  for (size_t i = 0; i < scopes.size(); ++i) {
    const LimitScope& s = scopes[i];
    if (s.limits->rpm <= 0 && s.limits->tpm <= 0) continue;
    ScopeBuckets& sb = i < kKept ? *found[i] : BucketsLocked(s.name);
    if (s.limits->rpm > 0) {
      sb.rpm.level -= 1;
      sb.rpm.taken += 1;
      sb.rpm.touched_us = now;
    }
    if (s.limits->tpm > 0) {
      sb.tpm.level -= static_cast<double>(tokens);
      sb.tpm.taken += static_cast<double>(tokens);
      sb.tpm.touched_us = now;
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
    Bucket& b = BucketsLocked(s.name).tpm;
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
    if (s.limits->rpm <= 0 && s.limits->tpm <= 0) continue;
    ScopeBuckets& sb = BucketsLocked(s.name);
    if (s.limits->rpm > 0) {
      Bucket& b = sb.rpm;
      Refill(b, s.limits->rpm, now);
      b.level = std::min(static_cast<double>(s.limits->rpm), b.level + 1);
      b.taken -= 1;
      b.touched_us = now;
    }
    if (s.limits->tpm > 0) {
      Bucket& b = sb.tpm;
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
  for (const auto& [name, sb] : scopes_) {
    const bool rpm_moved = sb.rpm.touched_us >= 0 && sb.rpm.touched_us >= since;
    const bool tpm_moved = sb.tpm.touched_us >= 0 && sb.tpm.touched_us >= since;
    if (!rpm_moved && !tpm_moved) continue;
    RateTotals& t = out[name];
    if (sb.rpm.touched_us >= 0) {
      t.requests = sb.rpm.taken;
      t.rpm = sb.rpm.limit;
    }
    if (sb.tpm.touched_us >= 0) {
      t.tokens = sb.tpm.taken;
      t.tpm = sb.tpm.limit;
    }
  }
  return out;
}

void RateLimiter::Debit(const std::string& scope, const RateTotals& taken) {
  if (!std::isfinite(taken.requests) || !std::isfinite(taken.tokens)) return;
  const int64_t now = clock_->NowMicros();
  std::lock_guard<std::mutex> lock(mu_);
  if (taken.requests == 0 && taken.tokens == 0) return;
  // A scope with neither limit here nor from the other gateway gets no entry.
  auto it = scopes_.find(scope);
  if (it == scopes_.end() && (taken.requests == 0 || taken.rpm <= 0) && (taken.tokens == 0 || taken.tpm <= 0)) return;
  ScopeBuckets& sb = it != scopes_.end() ? it->second : BucketsLocked(scope);
  if (taken.requests != 0) DebitBucket(sb.rpm, taken.requests, taken.rpm, now);
  if (taken.tokens != 0) DebitBucket(sb.tpm, taken.tokens, taken.tpm, now);
}

std::vector<std::string> RateLimiter::Prune(int64_t idle_us) {
  const int64_t now = clock_->NowMicros();
  std::lock_guard<std::mutex> lock(mu_);
  // A bucket may go when this limiter has not used it for `idle_us` and it has refilled to its
  // limit: a bucket made again later starts full, as this one would answer.
  auto idle_and_full = [&](Bucket& b) {
    if (b.touched_us >= 0 && b.touched_us > now - idle_us) return false;
    if (!b.init) return true;
    Refill(b, b.limit, now);
    return b.level >= static_cast<double>(b.limit);
  };
  std::vector<std::string> dropped;
  for (auto it = scopes_.begin(); it != scopes_.end();) {
    if (idle_and_full(it->second.rpm) && idle_and_full(it->second.tpm)) {
      dropped.push_back(it->first);
      it = scopes_.erase(it);
    } else {
      ++it;
    }
  }
  return dropped;
}

size_t RateLimiter::Scopes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return scopes_.size();
}

}  // namespace aicloud::gateway
