#include "gateway/rate_share.h"

#include <algorithm>
#include <cmath>

#include "gateway/stored_fields.h"

namespace aicloud::gateway {
namespace {

using stored::IntField;
using stored::NumField;
using stored::ObjectField;
using stored::SignedIntField;

constexpr const char* kKind = "GatewayRate";
// Totals beyond this are bogus (a hand-edited object must not overflow the arithmetic).
constexpr double kMaxTotal = 1e15;
// What is kept of a gateway whose lease lapsed (it may come back), and how long its object stays.
constexpr int64_t kForgetS = 3600;
// A gateway first seen with at most this many exchanges behind it started since the last look.
constexpr int64_t kNewPeerExchanges = 3;

}  // namespace

RateShare::RateShare(store::Store* store, RateLimiter* limiter, std::function<int64_t()> wall_seconds,
                     RateShareOptions options)
    : store_(store), limiter_(limiter), wall_seconds_(std::move(wall_seconds)), options_(std::move(options)) {}

void RateShare::Forget(const std::vector<std::string>& scopes) {
  std::lock_guard<std::mutex> lock(mu_);
  for (const std::string& scope : scopes) published_.erase(scope);
}

size_t RateShare::PublishedScopes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return published_.size();
}

int RateShare::Peers() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int>(std::count_if(peers_.begin(), peers_.end(), [](const auto& p) { return p.second.alive; }));
}

Status RateShare::Sync() {
  std::lock_guard<std::mutex> lock(mu_);
  const int64_t now = wall_seconds_();
  ++seq_;

  // Publish. A scope entering the object counts from here (since = this exchange).
  const std::unordered_map<std::string, RateTotals> totals = limiter_->Totals(options_.window_s * 1000000);
  store::json scopes = store::json::object();
  for (const auto& [scope, t] : totals) {
    Published& p = published_[scope];
    if (!p.live) {
      // Counting from what the others were last told, so nothing taken while this gateway
      // could not write (and the scope went idle meanwhile) is lost.
      p.since = seq_;
      p.base = p.written;
      p.live = true;
    }
    scopes[scope] = {{"requests", t.requests - p.base.requests}, {"tokens", t.tokens - p.base.tokens},
                     {"rpm", t.rpm}, {"tpm", t.tpm}, {"since", p.since}};
  }
  for (auto& [scope, p] : published_) {
    if (!totals.contains(scope)) p.live = false;
  }
  store::json o = {{"apiVersion", "aicloud/v1"},
                   {"kind", kKind},
                   {"metadata", {{"name", ObjectName()}}},
                   {"spec", {{"gateway", options_.id}}},
                   {"status", {{"expires", now + options_.lease_s}, {"seq", seq_}, {"scopes", std::move(scopes)}}}};
  StatusOr<store::json> w = store_->Update(o, 0);
  if (!w.ok() && w.status().code() == StatusCode::kNotFound) w = store_->Create(o);
  if (!w.ok()) return w.status();
  for (const auto& [scope, t] : totals) published_[scope].written = t;

  // Read the others.
  for (auto& [name, peer] : peers_) peer.alive = false;
  std::string token;
  do {
    StatusOr<store::ListResult> page = store_->List({.kind = kKind, .limit = 500, .continue_token = token});
    if (!page.ok()) return page.status();
    for (const store::json& obj : page->items) {
      const store::json& meta = ObjectField(obj, "metadata");
      auto name_it = meta.find("name");
      if (name_it == meta.end() || !name_it->is_string()) continue;
      const std::string name = name_it->get<std::string>();
      if (name == ObjectName()) continue;
      const store::json& st = ObjectField(obj, "status");
      const int64_t expires = SignedIntField(st, "expires", 0);
      if (expires <= now) {
        // Gone. Long gone: nobody will renew it; remove it (if no one rewrote it meanwhile).
        if (expires < now - kForgetS) (void)store_->Delete({kKind, "", name}, store::ResourceVersionOf(obj));
        continue;
      }
      if (expires > now + 10 * options_.lease_s) continue;  // a lease no gateway would write
      const bool known = peers_.contains(name);
      const int64_t peer_seq = SignedIntField(st, "seq", 0);
      Peer& peer = peers_[name];
      peer.alive = true;
      peer.alive_at = now;
      const store::json& entries = ObjectField(st, "scopes");
      std::unordered_map<std::string, Seen> seen;
      for (auto it = entries.begin(); it != entries.end(); ++it) {
        if (!it.value().is_object()) continue;
        Seen cur{SignedIntField(it.value(), "since", 0),
                 {std::min(NumField(it.value(), "requests"), kMaxTotal), std::min(NumField(it.value(), "tokens"), kMaxTotal),
                  IntField(it.value(), "rpm"), IntField(it.value(), "tpm")}};
        auto last = peer.last.find(it.key());
        if (last != peer.last.end() && last->second.since == cur.since) {
          limiter_->Debit(it.key(), {cur.totals.requests - last->second.totals.requests,
                                     cur.totals.tokens - last->second.totals.tokens, cur.totals.rpm, cur.totals.tpm});
        } else if (known || (synced_ && peer_seq <= kNewPeerExchanges)) {
          // Counted from zero since it entered the object, which this gateway has not seen:
          // all of it is new; so is everything of a gateway that started since the last look.
          limiter_->Debit(it.key(), cur.totals);
        }  // else: history (this gateway's first look, or a gateway back after being forgotten)
        seen.emplace(it.key(), cur);
      }
      peer.last = std::move(seen);  // scopes that left the object start over when they return
    }
    token = page->continue_token;
  } while (!token.empty());
  std::erase_if(peers_, [&](const auto& p) { return !p.second.alive && p.second.alive_at < now - kForgetS; });
  synced_ = true;
  return OkStatus();
}

Status RateShare::Release() {
  std::lock_guard<std::mutex> lock(mu_);
  StatusOr<store::json> d = store_->Delete({kKind, "", ObjectName()}, 0);
  if (!d.ok() && d.status().code() != StatusCode::kNotFound) return d.status();
  return OkStatus();
}

}  // namespace aicloud::gateway
