#include "gateway/limits.h"

#include <algorithm>
#include <cmath>

namespace aicloud::gateway {

void RateLimiter::Refill(Bucket& b, std::unordered_map<std::string, Pending>& pending, const std::string& name,
                         int64_t limit, int64_t now_us) {
  const double cap = static_cast<double>(limit);
  const double per_us = cap / 60e6;
  if (!b.init) {
    // A new bucket starts full, less what other gateways took meanwhile (refilled since).
    b.level = cap;
    b.at_us = now_us;
    b.init = true;
    if (auto it = pending.find(name); it != pending.end()) {
      const double since = static_cast<double>(std::max<int64_t>(0, now_us - it->second.at_us));
      b.level = std::clamp(cap - it->second.amount + per_us * since, -kMaxDebt * cap, cap);
      pending.erase(it);
    }
  } else {
    b.level = std::min(cap, b.level + per_us * static_cast<double>(std::max<int64_t>(0, now_us - b.at_us)));
    b.at_us = now_us;
  }
  b.limit = limit;
}

void RateLimiter::DebitBucket(std::unordered_map<std::string, Bucket>& buckets,
                              std::unordered_map<std::string, Pending>& pending, const std::string& name,
                              double amount, int64_t now_us) {
  auto it = buckets.find(name);
  if (it == buckets.end() || !it->second.init) {
    // Kept until this gateway's first request of the scope; refilled from the latest debit on
    // (the earlier ones refilled longer: this errs on the side of less room).
    Pending& p = pending[name];
    p.amount += amount;
    p.at_us = now_us;
    return;
  }
  Bucket& b = it->second;
  const double cap = static_cast<double>(b.limit);
  b.level = std::min(cap, b.level + cap / 60e6 * static_cast<double>(std::max<int64_t>(0, now_us - b.at_us)));
  b.at_us = now_us;
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
      Refill(b, rpm_pending_, s.name, l.rpm, now);
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
      Refill(b, tpm_pending_, s.name, l.tpm, now);
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
    Refill(b, tpm_pending_, s.name, s.limits->tpm, now);
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
      Refill(b, rpm_pending_, s.name, s.limits->rpm, now);
      b.level = std::min(static_cast<double>(s.limits->rpm), b.level + 1);
      b.taken -= 1;
      b.touched_us = now;
    }
    if (s.limits->tpm > 0) {
      Bucket& b = tpm_[s.name];
      Refill(b, tpm_pending_, s.name, s.limits->tpm, now);
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
  for (const auto& [name, b] : rpm_) {
    if (b.touched_us >= 0 && b.touched_us >= since) out[name].requests = b.taken;
  }
  for (const auto& [name, b] : tpm_) {
    if (b.touched_us >= 0 && b.touched_us >= since) out[name].tokens = b.taken;
  }
  return out;
}

void RateLimiter::Debit(const std::string& scope, double requests, double tokens) {
  if (!std::isfinite(requests) || !std::isfinite(tokens)) return;
  const int64_t now = clock_->NowMicros();
  std::lock_guard<std::mutex> lock(mu_);
  if (requests != 0) DebitBucket(rpm_, rpm_pending_, scope, requests, now);
  if (tokens != 0) DebitBucket(tpm_, tpm_pending_, scope, tokens, now);
  // Scopes only other gateways serve: forget what is older than any bucket remembers.
  if (++debits_ % 1024 == 0) {
    for (auto* pending : {&rpm_pending_, &tpm_pending_}) {
      std::erase_if(*pending, [&](const auto& e) { return now - e.second.at_us > kPendingKeepUs; });
    }
  }
}

}  // namespace aicloud::gateway
