#include "gateway/limits.h"

#include <algorithm>
#include <cmath>

namespace aicloud::gateway {

void RateLimiter::Refill(Bucket& b, int64_t limit, int64_t now_us) {
  const double cap = static_cast<double>(limit);
  if (!b.init) {
    b = {cap, now_us, true};
    return;
  }
  const double per_us = cap / 60e6;
  b.level = std::min(cap, b.level + per_us * static_cast<double>(std::max<int64_t>(0, now_us - b.at_us)));
  b.at_us = now_us;
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
    if (s.limits->rpm > 0) rpm_[s.name].level -= 1;
    if (s.limits->tpm > 0) tpm_[s.name].level -= static_cast<double>(tokens);
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
    }
    if (s.limits->tpm > 0) {
      Bucket& b = tpm_[s.name];
      Refill(b, s.limits->tpm, now);
      b.level = std::min(static_cast<double>(s.limits->tpm), b.level + static_cast<double>(tokens));
    }
  }
}

}  // namespace aicloud::gateway
