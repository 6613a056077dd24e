#include "gateway/rate_share.h"

#include <algorithm>
#include <cmath>
#include <set>

#include "gateway/stored_fields.h"

namespace aicloud::gateway {
namespace {

using stored::NumField;
using stored::ObjectField;
using stored::SignedIntField;

constexpr const char* kKind = "GatewayRate";
// Clock disagreement tolerated by the "new since my last look" rule.
constexpr int64_t kSlackS = 2;
// Totals beyond this are bogus (a hand-edited object must not drain every bucket forever).
constexpr double kMaxTotal = 1e15;

}  // namespace

RateShare::RateShare(store::Store* store, RateLimiter* limiter, std::function<int64_t()> wall_seconds,
                     RateShareOptions options)
    : store_(store),
      limiter_(limiter),
      wall_seconds_(std::move(wall_seconds)),
      options_(std::move(options)),
      started_(wall_seconds_()) {}

int RateShare::Peers() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int>(peers_.size());
}

Status RateShare::Sync() {
  std::lock_guard<std::mutex> lock(mu_);
  const int64_t now = wall_seconds_();

  // Publish. A scope's first use here came after the previous exchange (or the start).
  const std::unordered_map<std::string, RateTotals> totals = limiter_->Totals(options_.window_s * 1000000);
  store::json scopes = store::json::object();
  for (const auto& [scope, t] : totals) {
    Published& p = published_[scope];
    if (!p.live) {  // (re-)entering the object: count from here
      p.since = last_sync_ > 0 ? last_sync_ : started_;
      p.base = p.last;
    }
    p.last = t;
    scopes[scope] = {{"requests", t.requests - p.base.requests}, {"tokens", t.tokens - p.base.tokens}, {"since", p.since}};
  }
  for (auto& [scope, p] : published_) p.live = totals.contains(scope);
  store::json o = {{"apiVersion", "aicloud/v1"},
                   {"kind", kKind},
                   {"metadata", {{"name", ObjectName()}}},
                   {"spec", {{"gateway", options_.id}}},
                   {"status", {{"expires", now + options_.lease_s}, {"scopes", std::move(scopes)}}}};
  StatusOr<store::json> w = store_->Update(o, 0);
  if (!w.ok() && w.status().code() == StatusCode::kNotFound) w = store_->Create(o);
  if (!w.ok()) return w.status();

  // Read the others.
  std::set<std::string> alive;
  std::string token;
  do {
    StatusOr<store::ListResult> page = store_->List({.kind = kKind, .limit = 500, .continue_token = token});
    if (!page.ok()) return page.status();
    for (const store::json& obj : page->items) {
      const std::string name = ObjectField(obj, "metadata").value("name", std::string());
      if (name.empty() || name == ObjectName()) continue;
      const store::json& st = ObjectField(obj, "status");
      const int64_t expires = SignedIntField(st, "expires", 0);
      // Gone, or a lease no gateway would write.
      if (expires <= now || expires > now + 10 * options_.lease_s) continue;
      alive.insert(name);
      Peer& peer = peers_[name];
      const store::json& entries = ObjectField(st, "scopes");
      for (auto it = entries.begin(); it != entries.end(); ++it) {
        if (!it.value().is_object()) continue;
        const RateTotals cur{std::min(NumField(it.value(), "requests"), kMaxTotal),
                             std::min(NumField(it.value(), "tokens"), kMaxTotal)};
        const int64_t since = SignedIntField(it.value(), "since", 0);
        auto [last, fresh] = peer.last.try_emplace(it.key());
        if (!fresh && last->second.since == since) {
          limiter_->Debit(it.key(), cur.requests - last->second.totals.requests,
                          cur.tokens - last->second.totals.tokens);
        } else if (last_sync_ > 0 && since >= last_sync_ - kSlackS) {
          // Counted from after this gateway's previous look: all of it is new.
          limiter_->Debit(it.key(), cur.requests, cur.tokens);
        }  // else: counted from before what this gateway watched: the baseline
        last->second = {since, cur};
      }
    }
    token = page->continue_token;
  } while (!token.empty());
  std::erase_if(peers_, [&](const auto& p) { return !alive.contains(p.first); });
  last_sync_ = now;
  return OkStatus();
}

Status RateShare::Release() {
  std::lock_guard<std::mutex> lock(mu_);
  StatusOr<store::json> d = store_->Delete({kKind, "", ObjectName()}, 0);
  if (!d.ok() && d.status().code() != StatusCode::kNotFound) return d.status();
  return OkStatus();
}

}  // namespace aicloud::gateway
