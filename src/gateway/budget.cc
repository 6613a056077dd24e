#include "gateway/budget.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <thread>

#include "auth/auth.h"
#include "gateway/stored_fields.h"

namespace aicloud::gateway {
namespace {

using stored::IntField;
using stored::NumField;
using stored::ObjectField;
using stored::SignedIntField;

constexpr const char* kKind = "GatewayBudget";

// A grant's room for more: the chunk a ledger asks for beyond what it has in flight.
constexpr int64_t kLeaseMarginS = 2;
constexpr int64_t kMaxAmount = int64_t{1} << 60;  // stored amounts are clamped to this (no overflow)
constexpr int kSyncAttempts = 16;
// Writes in doubt remembered per scope. Each read drops those that can no longer land, so this
// is reached only by a store that keeps failing writes without moving; the oldest goes first,
// and if it was the one that landed its spending is counted twice (too much, never too little).
constexpr size_t kMaxDoubts = 64;
// How long a ledger's last write number stays in status.settled without its ledger writing
// again: the longest a gateway can be cut off from the store and still settle a write in doubt
// exactly once. Other ledgers carry the entries over, and drop them after this.
constexpr int64_t kSettledKeepS = 3600;
constexpr int kReserveRounds = 6;
constexpr int kSpareRetryAfterS = 2;

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
  if (options_.id.empty()) options_.id = auth::RandomHex(8);
  std::random_device rd;
  write_seq_ = (uint64_t{rd()} << 32 | rd()) >> 1;  // random start, far from wrapping
}

std::string BudgetLedger::ObjectName(const std::string& scope) {
  // Scope names carry key ids, which need not be DNS names: name the object by a digest.
  return "budget-" + auth::Sha256Hex(scope).substr(0, 24);
}

void BudgetLedger::RollLocked(Entry& e, int64_t now_s) const {
  const int64_t start = e.period_s > 0 ? now_s / e.period_s * e.period_s : 0;
  if (start != e.period_start) {
    // A new period: spending and grants start over.
    e.period_start = start;
    e.spent_tokens = 0;
    e.spent_cost = 0;
    e.unflushed_tokens = 0;
    e.unflushed_cost = 0;
    e.grant_tokens = 0;
    e.grant_cost = 0;
    e.others_tokens = 0;
    e.others_cost = 0;
    e.others_held_tokens = 0;
    e.others_held_cost = 0;
    e.grant_expires = 0;
    e.doubts.clear();  // what was in doubt was the old period's
    // Requests still in flight belong to the period they were admitted in: they settle there
    // (Settle drops them), so the new period starts with nothing reserved either.
    e.reserved_tokens = 0;
    e.reserved_cost = 0;
    e.in_flight = 0;
  }
}

bool BudgetLedger::FitsLocked(const Entry& e, int64_t tokens, double cost, int64_t now_s) const {
  if (store_ == nullptr) {
    return (e.budget_tokens <= 0 || e.spent_tokens + e.reserved_tokens + tokens <= e.budget_tokens) &&
           (e.budget_cost <= 0 || e.spent_cost + e.reserved_cost + cost <= e.budget_cost + 1e-12);
  }
  // Stop a little before the lease ends: another gateway's clock may run ahead of ours.
  if (now_s + kLeaseMarginS >= e.grant_expires) return false;
  const int64_t limit_tokens = e.sync_limit_tokens >= 0 ? std::min(e.grant_tokens, e.sync_limit_tokens) : e.grant_tokens;
  const double limit_cost = e.sync_limit_cost >= 0 ? std::min(e.grant_cost, e.sync_limit_cost) : e.grant_cost;
  return (e.budget_tokens <= 0 || e.unflushed_tokens + e.reserved_tokens + tokens <= limit_tokens) &&
         (e.budget_cost <= 0 || e.unflushed_cost + e.reserved_cost + cost <= limit_cost + 1e-12);
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
      const store::json& spec = ObjectField(o, "spec");
      const store::json& st = ObjectField(o, "status");
      auto scope = spec.find("scope");
      if (scope == spec.end() || !scope->is_string()) continue;
      const store::json& meta = ObjectField(o, "metadata");
      auto tenant = meta.find("tenant");
      Entry& e = entries_[scope->get<std::string>()];
      e.tenant = tenant != meta.end() && tenant->is_string() ? tenant->get<std::string>() : "";
      e.period_s = IntField(spec, "periodSeconds");
      e.period_start = SignedIntField(spec, "periodStart", 0);
      e.spent_tokens = IntField(st, "spentTokens");
      e.spent_cost = NumField(st, "spentCost");
      RollLocked(e, now);  // an object of a past period counts as nothing spent
      e.used_at = now;     // kept for a while, like a scope just used
    }
    token = page->continue_token;
  } while (!token.empty());
  return OkStatus();
}

BudgetLedger::Entry& BudgetLedger::EntryLocked(std::string_view name) {
  auto it = entries_.find(name);
  if (it == entries_.end()) it = entries_.try_emplace(std::string(name)).first;
  return it->second;
}

StatusOr<BudgetReservation> BudgetLedger::Reserve(std::span<const BudgetScope> scopes, int64_t tokens, double cost,
                                                  int* retry_after_s, bool may_block) {
  BudgetReservation r;
  r.tokens = tokens;
  r.cost = cost;
  std::vector<std::string> synced;  // scopes this call took a fresh look at
  // The entries looked up by the check, for the reservation that follows it under the same lock
  // (std::map references stay valid while no entry is erased, and erasing takes the lock).
  constexpr size_t kKept = 4;
  Entry* found[kKept] = {};
  for (int round = 0;; ++round) {
    const int64_t now = wall_seconds_();
    std::vector<std::string> short_of;  // scopes whose grant is too small (store mode)
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (size_t i = 0; i < scopes.size(); ++i) {
        const BudgetScope& s = scopes[i];
        const Limits& l = *s.limits;
        if (!l.HasBudget()) continue;
        Entry& e = EntryLocked(s.name);
        if (i < kKept) found[i] = &e;
        if (e.period_s != l.budget_period_s) {
          e.period_s = l.budget_period_s;
          e.period_start = -1;  // force a roll to the configured period
        }
        if (e.tenant != s.tenant) e.tenant = s.tenant;
        e.budget_tokens = l.budget_tokens;
        e.budget_cost = l.budget_cost;
        RollLocked(e, now);
        e.active = true;
        e.used_at = now;
        ++e.reserves;
        if (FitsLocked(e, tokens, cost, now)) continue;
        // What is left for everyone: budget - spent - what others hold - ours (in flight and
        // settled since the last sync). With a store these are the numbers of the last sync:
        // fresh once this call synced this scope.
        const int64_t left_tokens = l.budget_tokens - e.spent_tokens - e.unflushed_tokens - e.reserved_tokens - e.others_tokens;
        const double left_cost = l.budget_cost - e.spent_cost - e.unflushed_cost - e.reserved_cost - e.others_cost;
        // Other gateways' grants include spare room they give back at their next flush: when
        // that is what stands in the way, the wait is seconds, not the rest of the period.
        const bool spare_in_the_way =
            store_ != nullptr &&
            (l.budget_tokens <= 0 || left_tokens + (e.others_tokens - e.others_held_tokens) >= tokens) &&
            (l.budget_cost <= 0 || left_cost + (e.others_cost - e.others_held_cost) + 1e-12 >= cost);
        const bool tokens_out = l.budget_tokens > 0 && left_tokens < tokens;
        const bool cost_out = l.budget_cost > 0 && left_cost + 1e-12 < cost;
        const bool fresh = std::find(synced.begin(), synced.end(), s.name) != synced.end();
        if (store_ != nullptr && (!fresh || (!tokens_out && !cost_out))) {
          short_of.emplace_back(s.name);  // a larger grant may do: ask the store
          continue;
        }
        if (retry_after_s != nullptr) {
          *retry_after_s = spare_in_the_way ? kSpareRetryAfterS
                           : e.period_s > 0 ? static_cast<int>(std::clamp<int64_t>(e.period_start + e.period_s - now, 1, INT32_MAX))
                                            : 0;
        }
        auto deny = [&](const std::string& what) -> Status {
          return ResourceExhaustedError("budget: " + std::string(s.name) + " " + what + " in its " + PeriodName(e.period_s) +
                                        " budget period" +
                                        (spare_in_the_way ? "; other gateways hold part of it as spare room and give "
                                                            "it back within seconds"
                                                          : ""));
        };
        if (tokens_out || !cost_out) {
          return deny("has " + std::to_string(std::max<int64_t>(0, left_tokens)) + " of " +
                      std::to_string(l.budget_tokens) + " tokens left (in flight included); this request may use up to " +
                      std::to_string(tokens));
        }
        return deny("has " + Num(std::max(0.0, left_cost)) + " of " + Num(l.budget_cost) +
                    " cost left (in flight included); this request may cost up to " + Num(cost));
      }
      if (short_of.empty()) {
        for (size_t i = 0; i < scopes.size(); ++i) {
          const BudgetScope& s = scopes[i];
          if (!s.limits->HasBudget()) continue;
          Entry& e = i < kKept ? *found[i] : EntryLocked(s.name);
          e.reserved_tokens += tokens;
          e.reserved_cost += cost;
          ++e.in_flight;
          r.parts.push_back({std::string(s.name), e.period_start});
        }
        return r;
      }
    }
    // A grant is too small: take more through the store, then look again. Others may take the
    // new room first; the request is refused as out of budget only when a fresh look at the
    // store says so, and answered UNAVAILABLE (try again shortly) if it keeps losing the race.
    if (!may_block) return UnavailableError("budget: " + short_of[0] + " needs a larger grant from the store");
    if (round + 1 >= kReserveRounds) {
      return UnavailableError("budget: " + short_of[0] + ": the shared budget is busy; try again");
    }
    for (const std::string& name : short_of) {
      if (Status st = Sync(name, tokens, cost); !st.ok()) {
        return Status(StatusCode::kUnavailable, "budget: " + name + ": " + st.message());
      }
      if (std::find(synced.begin(), synced.end(), name) == synced.end()) synced.push_back(name);
    }
  }
}

void BudgetLedger::Settle(const BudgetReservation& r, int64_t tokens, double cost) {
  if (r.parts.empty()) return;
  const int64_t now = wall_seconds_();
  std::lock_guard<std::mutex> lock(mu_);
  for (const BudgetReservation::Part& p : r.parts) {
    auto it = entries_.find(p.name);
    if (it == entries_.end()) continue;  // pruned: then its period is over, and with it this reservation's
    Entry& e = it->second;
    RollLocked(e, now);
    e.used_at = now;
    if (p.period_start != e.period_start) continue;  // admitted in a period that is over
    e.reserved_tokens = std::max<int64_t>(0, e.reserved_tokens - r.tokens);
    e.reserved_cost = std::max(0.0, e.reserved_cost - r.cost);
    if (--e.in_flight <= 0) {  // no rounding residue keeps an idle scope "in flight"
      e.in_flight = 0;
      e.reserved_tokens = 0;
      e.reserved_cost = 0;
    }
    tokens = std::max<int64_t>(0, tokens);
    cost = std::max(0.0, cost);
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
  std::shared_ptr<std::mutex> scope_lock;
  {
    std::lock_guard<std::mutex> lock(mu_);
    std::shared_ptr<std::mutex>& l = sync_locks_[name];
    if (!l) l = std::make_shared<std::mutex>();
    scope_lock = l;
  }
  std::lock_guard<std::mutex> sync_lock(*scope_lock);
  thread_local std::minstd_rand jitter(std::random_device{}());
  for (int attempt = 0; attempt < kSyncAttempts; ++attempt) {
    if (attempt > 0) {  // lost a compare-and-swap to another gateway: back off, jittered
      const int base_us = 500 << std::min(attempt, 6);
      std::this_thread::sleep_for(std::chrono::microseconds(base_us / 2 + static_cast<int>(jitter() % base_us)));
    }
    const int64_t now = wall_seconds_();
    std::string tenant;
    int64_t period_s, period_start, budget_tokens;
    double budget_cost;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto found = entries_.find(name);
      if (found == entries_.end()) return OkStatus();  // pruned: nothing to sync
      Entry& e = found->second;
      RollLocked(e, now);
      budget_tokens = std::max<int64_t>(e.budget_tokens, 0);
      budget_cost = std::max(e.budget_cost, 0.0);
      tenant = e.tenant;
      period_s = e.period_s;
      period_start = e.period_start;
    }
    const store::ObjectKey key{kKind, tenant, ObjectName(name)};
    StatusOr<store::json> cur = store_->Get(key);
    if (!cur.ok() && cur.status().code() != StatusCode::kNotFound) return cur.status();
    int64_t spent_tokens = 0, others_tokens = 0, others_held_tokens = 0, others_live = 0;
    double spent_cost = 0, others_cost = 0, others_held_cost = 0;
    store::json grants = store::json::object();
    store::json settled = store::json::object();  // write numbers: the others' kept, ours replaced
    std::string stored_seq;                        // this ledger's last write number that landed
    if (cur.ok()) {
      const store::json& spec = ObjectField(*cur, "spec");
      const store::json& st = ObjectField(*cur, "status");
      const int64_t stored_start = SignedIntField(spec, "periodStart", -1);
      const bool same_length = SignedIntField(spec, "periodSeconds", -1) == period_s;
      if (same_length && stored_start > period_start) {
        return UnavailableError("the shared budget is already in a later period (this host's clock is behind)");
      }
      if (same_length && stored_start == period_start) {
        spent_tokens = std::min(IntField(st, "spentTokens"), kMaxAmount);
        spent_cost = std::min(NumField(st, "spentCost"), static_cast<double>(kMaxAmount));
        const store::json& s = ObjectField(st, "settled");
        for (auto it = s.begin(); it != s.end(); ++it) {
          if (!it.value().is_object()) continue;
          auto seq = it.value().find("seq");
          if (seq == it.value().end() || !seq->is_string()) continue;
          if (it.key() == options_.id) {
            stored_seq = seq->get<std::string>();
            continue;
          }
          const int64_t expires = SignedIntField(it.value(), "expires", 0);
          if (expires > now && expires <= now + 2 * kSettledKeepS) settled[it.key()] = it.value();  // clocks differ
        }
        const store::json& g = ObjectField(st, "grants");
        for (auto it = g.begin(); it != g.end(); ++it) {
          if (it.key() == options_.id || !it.value().is_object()) continue;
          const int64_t expires = SignedIntField(it.value(), "expires", 0);
          // Gone, or a lease no gateway would write (a bogus object must not lock the budget).
          if (expires <= now || expires > now + 10 * options_.lease_s) continue;
          const int64_t t = std::min(IntField(it.value(), "tokens"), budget_tokens);
          const double c = std::min(NumField(it.value(), "cost"), budget_cost);
          const int64_t ht = std::min(IntField(it.value(), "heldTokens"), t);
          const double hc = std::min(NumField(it.value(), "heldCost"), c);
          others_tokens = std::min(others_tokens + t, budget_tokens);
          others_cost = std::min(others_cost + c, budget_cost);
          others_held_tokens = std::min(others_held_tokens + ht, budget_tokens);
          others_held_cost = std::min(others_held_cost + hc, budget_cost);
          ++others_live;
          grants[it.key()] = {{"tokens", t}, {"cost", c}, {"heldTokens", ht}, {"heldCost", hc}, {"expires", expires}};
        }
      }
    }
    // Decide with the live numbers, and until the write lands admit only within both the grant
    // the store holds now and the one being written.
    int64_t unflushed_tokens, reserved_tokens, grant_tokens, old_grant_tokens;
    double unflushed_cost, grant_cost, old_grant_cost, reserved_cost_now;
    uint64_t reserves, seq;
    uint64_t landed_seq = 0;  // the write in doubt the object shows landed (0: none)
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto found = entries_.find(name);
      if (found == entries_.end()) return OkStatus();  // pruned meanwhile: nothing to sync
      Entry& e = found->second;
      if (e.period_start != period_start || e.period_s != period_s) continue;  // rolled meanwhile: look again
      seq = ++write_seq_;
      unflushed_tokens = e.unflushed_tokens;
      unflushed_cost = e.unflushed_cost;
      // Of what is unflushed, the part a write in doubt that landed carried is in spent already.
      // Writes in doubt whose base the object has moved past (or, absent, an update's) can no
      // longer land: forgotten, except the one that did.
      int64_t landed_tokens = 0;
      double landed_cost = 0;
      for (const Entry::Doubt& d : e.doubts) {
        if (!stored_seq.empty() && stored_seq == std::to_string(d.seq)) {
          landed_tokens = d.tokens;
          landed_cost = d.cost;
          landed_seq = d.seq;
          break;
        }
      }
      const int64_t base = cur.ok() ? store::ResourceVersionOf(*cur) : -1;
      std::erase_if(e.doubts, [&](const Entry::Doubt& d) { return d.seq != landed_seq && d.base != base; });
      reserved_tokens = e.reserved_tokens;
      const double reserved_cost = e.reserved_cost;
      reserved_cost_now = reserved_cost;
      reserves = e.reserves;
      old_grant_tokens = e.grant_tokens;
      old_grant_cost = e.grant_cost;
      spent_tokens += unflushed_tokens - landed_tokens;
      spent_cost += unflushed_cost - landed_cost;
      // What this ledger holds from now: its reservations (never less: they are out already),
      // what it was asked for, and a chunk of room while requests come, within what is left.
      // The room asked for shrinks as more gateways share the budget, so the spare room of many
      // cannot crowd out a newcomer: at most 1/8 of the budget, at most half of what is left
      // divided among the gateways holding grants.
      const bool wants_room = !release && (e.active || extra_tokens > 0 || extra_cost > 0);
      const int64_t left_tokens = e.budget_tokens - spent_tokens - others_tokens;
      const double left_cost = e.budget_cost - spent_cost - others_cost;
      const int64_t room_tokens = std::min(Chunk(e.budget_tokens), std::max<int64_t>(0, left_tokens) / (2 * (others_live + 1)));
      const double room_cost = std::min(Chunk(e.budget_cost), std::max(0.0, left_cost) / static_cast<double>(2 * (others_live + 1)));
      const int64_t want_tokens = reserved_tokens + extra_tokens + (wants_room ? room_tokens : 0);
      const double want_cost = reserved_cost + extra_cost + (wants_room ? room_cost : 0);
      grant_tokens = e.budget_tokens > 0 ? std::max(reserved_tokens, std::min(want_tokens, std::max<int64_t>(left_tokens, 0))) : 0;
      grant_cost = e.budget_cost > 0 ? std::max(reserved_cost, std::min(want_cost, std::max(left_cost, 0.0))) : 0;
      // Within every grant that may be in the store: the one written now, and those of writes
      // that failed since the last success (kept lowered until a write succeeds).
      const int64_t limit_tokens = grant_tokens + unflushed_tokens;
      const double limit_cost = grant_cost + unflushed_cost;
      e.sync_limit_tokens = e.sync_limit_tokens >= 0 ? std::min(e.sync_limit_tokens, limit_tokens) : limit_tokens;
      e.sync_limit_cost = e.sync_limit_cost >= 0 ? std::min(e.sync_limit_cost, limit_cost) : limit_cost;
    }
    const int64_t expires = now + options_.lease_s;
    if (grant_tokens > 0 || grant_cost > 0) {
      // What of the grant is taken (in flight), so others refuse only for what is really spent.
      grants[options_.id] = {{"tokens", grant_tokens}, {"cost", grant_cost},
                             {"heldTokens", std::min(reserved_tokens + extra_tokens, grant_tokens)},
                             {"heldCost", std::min(reserved_cost_now + extra_cost, grant_cost)}, {"expires", expires}};
    }
    Status written;
    const bool changes = unflushed_tokens != 0 || unflushed_cost != 0 || grant_tokens > 0 || grant_cost > 0 ||
                         old_grant_tokens > 0 || old_grant_cost > 0 || !cur.ok();
    if (changes) {
      settled[options_.id] = {{"seq", std::to_string(seq)}, {"expires", now + kSettledKeepS}};
      store::json o = {{"apiVersion", "aicloud/v1"},
                       {"kind", kKind},
                       {"metadata", {{"name", key.name}, {"tenant", tenant}}},
                       {"spec", {{"scope", name}, {"periodStart", period_start}, {"periodSeconds", period_s}}},
                       {"status",
                        {{"spentTokens", spent_tokens}, {"spentCost", spent_cost}, {"grants", grants}, {"settled", settled}}}};
      StatusOr<store::json> w = cur.ok() ? store_->Update(o, store::ResourceVersionOf(*cur)) : store_->Create(o);
      written = w.status();
    }
    std::lock_guard<std::mutex> lock(mu_);
    auto found = entries_.find(name);
    if (found == entries_.end()) return written;  // cannot happen: Prune keeps a scope being synced
    Entry& e = found->second;
    if (!written.ok()) {
      // Whatever the answer, the write may have landed (a refusal can answer a resent copy of a
      // request whose first copy landed): a later sync tells from its number.
      if (changes && (unflushed_tokens != 0 || unflushed_cost != 0) && e.period_start == period_start &&
          e.period_s == period_s) {
        if (e.doubts.size() >= kMaxDoubts) {  // the oldest goes, unless it is the one that landed
          auto victim = e.doubts.begin();
          if (victim->seq == landed_seq) ++victim;
          e.doubts.erase(victim);
        }
        e.doubts.push_back({seq, unflushed_tokens, unflushed_cost, cur.ok() ? store::ResourceVersionOf(*cur) : -1});
      }
      const StatusCode c = written.code();
      if (c == StatusCode::kAborted || c == StatusCode::kAlreadyExists || c == StatusCode::kNotFound) {
        continue;  // refused (most likely: another gateway wrote first): look again
      }
      // Unknown outcome: keep admitting within both grants until a sync succeeds.
      return written;
    }
    e.sync_limit_tokens = -1;  // the store holds the new grant
    e.sync_limit_cost = -1;
    if (e.period_start != period_start || e.period_s != period_s) return OkStatus();  // the period rolled meanwhile
    e.spent_tokens = spent_tokens;
    e.spent_cost = spent_cost;
    e.unflushed_tokens -= unflushed_tokens;  // settlements during the round trip stay
    e.unflushed_cost -= unflushed_cost;
    if (changes) e.doubts.clear();  // none of them can land after this compare-and-swap
    e.grant_tokens = grant_tokens;
    e.grant_cost = grant_cost;
    e.others_tokens = others_tokens;
    e.others_cost = others_cost;
    e.others_held_tokens = others_held_tokens;
    e.others_held_cost = others_held_cost;
    e.grant_expires = grant_tokens > 0 || grant_cost > 0 ? expires : 0;
    e.active = e.reserves != reserves;  // a request came during the round trip
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

size_t BudgetLedger::Prune(int64_t idle_s) {
  const int64_t now = wall_seconds_();
  std::lock_guard<std::mutex> lock(mu_);
  // A scope whose sync is under way (or waiting) stays: its round trip reads the entry again.
  std::erase_if(sync_locks_, [](const auto& item) { return item.second.use_count() == 1; });
  return std::erase_if(entries_, [&](const auto& item) {
    if (sync_locks_.contains(item.first)) return false;
    const Entry& e = item.second;
    const bool holds = e.in_flight > 0 || e.reserved_tokens > 0 || e.reserved_cost > 0 || e.unflushed_tokens != 0 ||
                       e.unflushed_cost != 0 || e.grant_tokens > 0 || e.grant_cost > 0 ||
                       (store_ != nullptr && e.active) ||  // "reserved since the last sync": a store's
                       e.sync_limit_tokens >= 0 || e.sync_limit_cost >= 0 || !e.doubts.empty();
    if (holds || now - e.used_at < idle_s) return false;
    if (store_ != nullptr) return true;
    return e.period_s > 0 && now >= e.period_start + e.period_s;
  });
}

size_t BudgetLedger::Scopes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return entries_.size();
}

}  // namespace aicloud::gateway
