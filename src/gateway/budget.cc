#include "gateway/budget.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>

#include "auth/auth.h"

namespace aicloud::gateway {
namespace {

constexpr const char* kKind = "GatewayBudget";

std::string RandomId() {
  std::random_device rd;
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%08x%08x", rd(), rd());
  return buf;
}

// A grant's room for more: the chunk a ledger asks for beyond what it has in flight.
int64_t Chunk(int64_t budget) { return budget > 0 ? std::max<int64_t>(1, budget / 8) : 0; }
double Chunk(double budget) { return budget > 0 ? budget / 8 : 0; }

std::string Num(double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.6g", v);
  return buf;
}

}  // namespace

StatusOr<int64_t> ParsePeriod(std::string_view t) {
  if (t.empty() || t == "none" || t == "lifetime") return int64_t{0};
  int64_t n = 0;
  size_t i = 0;
  for (; i < t.size() && t[i] >= '0' && t[i] <= '9'; ++i) {
    n = n * 10 + (t[i] - '0');
    if (n > 100'000'000) break;
  }
  std::string_view unit = t.substr(i);
  int64_t mult = 0;
  if (unit == "s") mult = 1;
  else if (unit == "m") mult = 60;
  else if (unit == "h") mult = 3600;
  else if (unit == "d") mult = 86400;
  if (i == 0 || n <= 0 || mult == 0 || n > 100'000'000) {
    return InvalidArgumentError("\"" + std::string(t) + "\" is not a period like 30s, 15m, 1h, 1d or 30d");
  }
  return n * mult;
}

std::string PeriodName(int64_t s) {
  if (s == 0) return "lifetime";
  if (s % 86400 == 0) return std::to_string(s / 86400) + "d";
  if (s % 3600 == 0) return std::to_string(s / 3600) + "h";
  if (s % 60 == 0) return std::to_string(s / 60) + "m";
  return std::to_string(s) + "s";
}

BudgetLedger::BudgetLedger(store::Store* store, std::function<int64_t()> wall_seconds, BudgetLedgerOptions options)
    : store_(store), wall_seconds_(std::move(wall_seconds)), options_(std::move(options)) {
  if (options_.id.empty()) options_.id = RandomId();
}

std::string BudgetLedger::ObjectName(const std::string& scope) {
  // Scope names carry key ids, which need not be DNS names: name the object by a digest.
  return "budget-" + auth::Sha256Hex(scope).substr(0, 24);
}

void BudgetLedger::RollLocked(Entry& e, int64_t now_s) const {
  const int64_t start = e.period_s > 0 ? now_s / e.period_s * e.period_s : 0;
  if (start != e.period_start) {
    // A new period: spending starts over, grants are per period; in-flight reservations stay
    // counted (and will be settled into the new period).
    e.period_start = start;
    e.spent_tokens = 0;
    e.spent_cost = 0;
    e.unflushed_tokens = 0;
    e.unflushed_cost = 0;
    e.grant_tokens = 0;
    e.grant_cost = 0;
    e.others_tokens = 0;
    e.others_cost = 0;
    e.grant_expires = 0;
  }
}

bool BudgetLedger::FitsLocked(const Entry& e, int64_t tokens, double cost, int64_t now_s) const {
  if (store_ == nullptr) {
    return (e.budget_tokens <= 0 || e.spent_tokens + e.reserved_tokens + tokens <= e.budget_tokens) &&
           (e.budget_cost <= 0 || e.spent_cost + e.reserved_cost + cost <= e.budget_cost + 1e-12);
  }
  if (now_s >= e.grant_expires) return false;
  return (e.budget_tokens <= 0 || e.unflushed_tokens + e.reserved_tokens + tokens <= e.grant_tokens) &&
         (e.budget_cost <= 0 || e.unflushed_cost + e.reserved_cost + cost <= e.grant_cost + 1e-12);
}

Status BudgetLedger::Load() {
  if (store_ == nullptr) return OkStatus();
  const int64_t now = wall_seconds_();
  std::string token;
  do {
    StatusOr<store::ListResult> page = store_->List({.kind = kKind, .limit = 500, .continue_token = token});
    if (!page.ok()) return page.status();
    std::lock_guard<std::mutex> lock(mu_);
    for (const store::json& o : page->items) {
      const store::json& spec = o.value("spec", store::json::object());
      const store::json& st = o.value("status", store::json::object());
      if (!spec.contains("scope") || !spec["scope"].is_string()) continue;
      Entry& e = entries_[spec["scope"].get<std::string>()];
      e.tenant = o["metadata"].value("tenant", "");
      e.period_s = spec.value("periodSeconds", int64_t{0});
      e.period_start = spec.value("periodStart", int64_t{0});
      e.spent_tokens = st.value("spentTokens", int64_t{0});
      e.spent_cost = st.value("spentCost", 0.0);
      RollLocked(e, now);  // an object of a past period counts as nothing spent
    }
    token = page->continue_token;
  } while (!token.empty());
  return OkStatus();
}

StatusOr<BudgetReservation> BudgetLedger::Reserve(std::span<const BudgetScope> scopes, int64_t tokens, double cost,
                                                  int* retry_after_s, bool may_block) {
  BudgetReservation r;
  r.tokens = tokens;
  r.cost = cost;
  for (int round = 0;; ++round) {
    const int64_t now = wall_seconds_();
    std::string short_of;  // a scope whose grant is too small (store mode)
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (const BudgetScope& s : scopes) {
        const Limits& l = *s.limits;
        if (!l.HasBudget()) continue;
        Entry& e = entries_[s.name];
        if (e.period_s != l.budget_period_s) {
          e.period_s = l.budget_period_s;
          e.period_start = -1;  // force a roll to the configured period
        }
        e.tenant = s.tenant;
        e.budget_tokens = l.budget_tokens;
        e.budget_cost = l.budget_cost;
        RollLocked(e, now);
        e.active = true;
        if (FitsLocked(e, tokens, cost, now)) continue;
        if (store_ != nullptr && round == 0) {
          short_of = s.name;
          break;
        }
        // Out of budget. What is left for everyone: budget - spent - what others hold - ours.
        if (retry_after_s != nullptr) {
          *retry_after_s = e.period_s > 0 ? static_cast<int>(e.period_start + e.period_s - now) : 0;
        }
        auto deny = [&](const std::string& what) -> Status {
          return ResourceExhaustedError("budget: " + s.name + " " + what + " in its " + PeriodName(e.period_s) +
                                        " budget period");
        };
        const bool live = store_ != nullptr && now < e.grant_expires;
        if (l.budget_tokens > 0 &&
            !(store_ == nullptr ? e.spent_tokens + e.reserved_tokens + tokens <= l.budget_tokens
                                : live && e.unflushed_tokens + e.reserved_tokens + tokens <= e.grant_tokens)) {
          const int64_t left = std::max<int64_t>(0, l.budget_tokens - e.spent_tokens - e.unflushed_tokens -
                                                        e.reserved_tokens - e.others_tokens);
          return deny("has " + std::to_string(left) + " of " + std::to_string(l.budget_tokens) +
                      " tokens left (in flight included); this request may use up to " + std::to_string(tokens));
        }
        const double left = std::max(0.0, l.budget_cost - e.spent_cost - e.unflushed_cost - e.reserved_cost -
                                              e.others_cost);
        return deny("has " + Num(left) + " of " + Num(l.budget_cost) +
                    " cost left (in flight included); this request may cost up to " + Num(cost));
      }
      if (short_of.empty()) {
        for (const BudgetScope& s : scopes) {
          if (!s.limits->HasBudget()) continue;
          Entry& e = entries_[s.name];
          e.reserved_tokens += tokens;
          e.reserved_cost += cost;
          r.parts.push_back({s.name, e.period_start});
        }
        return r;
      }
    }
    // The grant is too small: take more through the store, then look again (once).
    if (!may_block) return UnavailableError("budget: " + short_of + " needs a larger grant from the store");
    for (const BudgetScope& s : scopes) {
      if (!s.limits->HasBudget()) continue;
      bool fits;
      {
        std::lock_guard<std::mutex> lock(mu_);
        fits = FitsLocked(entries_[s.name], tokens, cost, now);
      }
      if (fits) continue;
      if (Status st = Sync(s.name, tokens, cost); !st.ok()) {
        return Status(StatusCode::kUnavailable, "budget: " + s.name + ": " + st.message());
      }
    }
  }
}

void BudgetLedger::Settle(const BudgetReservation& r, int64_t tokens, double cost) {
  if (r.parts.empty()) return;
  const int64_t now = wall_seconds_();
  std::lock_guard<std::mutex> lock(mu_);
  for (const BudgetReservation::Part& p : r.parts) {
    Entry& e = entries_[p.name];
    e.reserved_tokens = std::max<int64_t>(0, e.reserved_tokens - r.tokens);
    e.reserved_cost = std::max(0.0, e.reserved_cost - r.cost);
    RollLocked(e, now);
    if (store_ == nullptr) {
      e.spent_tokens += tokens;
      e.spent_cost += cost;
    } else {
      e.unflushed_tokens += tokens;
      e.unflushed_cost += cost;
    }
  }
}

BudgetUsage BudgetLedger::Usage(const std::string& scope) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = entries_.find(scope);
  if (it == entries_.end()) return {};
  const Entry& e = it->second;
  return {.spent_tokens = e.spent_tokens + e.unflushed_tokens,
          .reserved_tokens = e.reserved_tokens,
          .spent_cost = e.spent_cost + e.unflushed_cost,
          .reserved_cost = e.reserved_cost,
          .period_start = e.period_start};
}

Status BudgetLedger::Sync(const std::string& name, int64_t extra_tokens, double extra_cost, bool release) {
  std::lock_guard<std::mutex> sync_lock(sync_mu_);
  for (int attempt = 0; attempt < 16; ++attempt) {
    const int64_t now = wall_seconds_();
    Entry snap;
    {
      std::lock_guard<std::mutex> lock(mu_);
      Entry& e = entries_[name];
      RollLocked(e, now);
      snap = e;
    }
    const store::ObjectKey key{kKind, snap.tenant, ObjectName(name)};
    StatusOr<store::json> cur = store_->Get(key);
    if (!cur.ok() && cur.status().code() != StatusCode::kNotFound) return cur.status();
    store::json status = store::json::object();
    int64_t spent_tokens = 0, others_tokens = 0;
    double spent_cost = 0, others_cost = 0;
    store::json grants = store::json::object();
    if (cur.ok()) {
      const store::json spec = cur->value("spec", store::json::object());
      const store::json st = cur->value("status", store::json::object());
      if (spec.value("periodStart", int64_t{-1}) == snap.period_start &&
          spec.value("periodSeconds", int64_t{-1}) == snap.period_s && st.is_object()) {
        spent_tokens = st.value("spentTokens", int64_t{0});
        spent_cost = st.value("spentCost", 0.0);
        const store::json g = st.value("grants", store::json::object());
        if (g.is_object()) {
          for (auto it = g.begin(); it != g.end(); ++it) {
            if (it.key() == options_.id || !it.value().is_object()) continue;
            if (it.value().value("expires", int64_t{0}) <= now) continue;  // that ledger is gone
            others_tokens += it.value().value("tokens", int64_t{0});
            others_cost += it.value().value("cost", 0.0);
            grants[it.key()] = it.value();
          }
        }
      }
    }
    spent_tokens += snap.unflushed_tokens;
    spent_cost += snap.unflushed_cost;
    // What this ledger holds from now: its reservations (never less: they are out already),
    // what it was asked for, and a chunk of room while requests come, within what is left.
    const bool wants_room = !release && (snap.active || extra_tokens > 0 || extra_cost > 0);
    const int64_t want_tokens = snap.reserved_tokens + extra_tokens + (wants_room ? Chunk(snap.budget_tokens) : 0);
    const double want_cost = snap.reserved_cost + extra_cost + (wants_room ? Chunk(snap.budget_cost) : 0);
    const int64_t left_tokens = snap.budget_tokens - spent_tokens - others_tokens;
    const double left_cost = snap.budget_cost - spent_cost - others_cost;
    const int64_t grant_tokens =
        snap.budget_tokens > 0 ? std::max(snap.reserved_tokens, std::min(want_tokens, std::max<int64_t>(left_tokens, 0))) : 0;
    const double grant_cost =
        snap.budget_cost > 0 ? std::max(snap.reserved_cost, std::min(want_cost, std::max(left_cost, 0.0))) : 0;
    const int64_t expires = now + options_.lease_s;
    if (grant_tokens > 0 || grant_cost > 0) {
      grants[options_.id] = {{"tokens", grant_tokens}, {"cost", grant_cost}, {"expires", expires}};
    }
    const bool changes = snap.unflushed_tokens != 0 || snap.unflushed_cost != 0 || grant_tokens > 0 ||
                         grant_cost > 0 || snap.grant_tokens > 0 || snap.grant_cost > 0 || !cur.ok();
    if (changes) {
      store::json o = {{"apiVersion", "aicloud/v1"},
                       {"kind", kKind},
                       {"metadata", {{"name", key.name}, {"tenant", snap.tenant}}},
                       {"spec", {{"scope", name}, {"periodStart", snap.period_start}, {"periodSeconds", snap.period_s}}},
                       {"status", {{"spentTokens", spent_tokens}, {"spentCost", spent_cost}, {"grants", grants}}}};
      StatusOr<store::json> w = cur.ok() ? store_->Update(o, store::ResourceVersionOf(*cur)) : store_->Create(o);
      if (!w.ok()) {
        const StatusCode c = w.status().code();
        if (c == StatusCode::kAborted || c == StatusCode::kAlreadyExists || c == StatusCode::kNotFound) continue;
        return w.status();
      }
    }
    std::lock_guard<std::mutex> lock(mu_);
    Entry& e = entries_[name];
    if (e.period_start != snap.period_start) return OkStatus();  // the period rolled meanwhile
    e.spent_tokens = spent_tokens;
    e.spent_cost = spent_cost;
    e.unflushed_tokens -= snap.unflushed_tokens;  // settlements during the round trip stay
    e.unflushed_cost -= snap.unflushed_cost;
    e.grant_tokens = grant_tokens;
    e.grant_cost = grant_cost;
    e.others_tokens = others_tokens;
    e.others_cost = others_cost;
    e.grant_expires = expires;
    e.active = false;
    return OkStatus();
  }
  return AbortedError("too many concurrent updates of its shared budget; try again");
}

Status BudgetLedger::Flush(bool release) {
  if (store_ == nullptr) return OkStatus();
  std::vector<std::string> names;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [scope, e] : entries_) {
      const bool holds = e.grant_tokens > 0 || e.grant_cost > 0;
      if (e.unflushed_tokens != 0 || e.unflushed_cost != 0 || e.reserved_tokens > 0 || e.reserved_cost > 0 || holds ||
          e.active) {
        names.push_back(scope);
      }
    }
  }
  Status first;
  for (const std::string& n : names) {
    if (Status s = Sync(n, 0, 0, release); !s.ok() && first.ok()) first = Status(s.code(), n + ": " + s.message());
  }
  return first;
}

}  // namespace aicloud::gateway
