#include "gateway/budget.h"

#include <cmath>
#include <cstdio>

#include "auth/auth.h"

namespace aicloud::gateway {
namespace {

constexpr const char* kKind = "GatewayBudget";

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

BudgetLedger::BudgetLedger(store::Store* store, std::function<int64_t()> wall_seconds)
    : store_(store), wall_seconds_(std::move(wall_seconds)) {}

std::string BudgetLedger::ObjectName(const std::string& scope) {
  // Scope names carry key ids, which need not be DNS names: name the object by a digest.
  return "budget-" + auth::Sha256Hex(scope).substr(0, 24);
}

void BudgetLedger::RollLocked(Entry& e, int64_t now_s) const {
  const int64_t start = e.period_s > 0 ? now_s / e.period_s * e.period_s : 0;
  if (start != e.u.period_start) {
    // A new period: spending starts over; in-flight reservations stay counted.
    e.u.period_start = start;
    e.u.spent_tokens = 0;
    e.u.spent_cost = 0;
    e.dirty = true;
  }
}

Status BudgetLedger::Load() {
  if (store_ == nullptr) return OkStatus();
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
      e.u.period_start = spec.value("periodStart", int64_t{0});
      e.u.spent_tokens = st.value("spentTokens", int64_t{0});
      e.u.spent_cost = st.value("spentCost", 0.0);
      e.stored = true;
    }
    token = page->continue_token;
  } while (!token.empty());
  return OkStatus();
}

StatusOr<BudgetReservation> BudgetLedger::Reserve(std::span<const BudgetScope> scopes, int64_t tokens, double cost,
                                                  int* retry_after_s) {
  BudgetReservation r;
  r.tokens = tokens;
  r.cost = cost;
  const int64_t now = wall_seconds_();
  std::lock_guard<std::mutex> lock(mu_);
  for (const BudgetScope& s : scopes) {
    const Limits& l = *s.limits;
    if (!l.HasBudget()) continue;
    Entry& e = entries_[s.name];
    if (e.period_s != l.budget_period_s) {
      e.period_s = l.budget_period_s;
      e.u.period_start = -1;  // force a roll to the configured period
    }
    e.tenant = s.tenant;
    RollLocked(e, now);
    auto deny = [&](const std::string& what) -> Status {
      if (retry_after_s != nullptr) {
        *retry_after_s = e.period_s > 0 ? static_cast<int>(e.u.period_start + e.period_s - now) : 0;
      }
      return ResourceExhaustedError("budget: " + s.name + " " + what + " in its " + PeriodName(e.period_s) +
                                    " budget period");
    };
    if (l.budget_tokens > 0 && e.u.spent_tokens + e.u.reserved_tokens + tokens > l.budget_tokens) {
      const int64_t left = std::max<int64_t>(0, l.budget_tokens - e.u.spent_tokens - e.u.reserved_tokens);
      return deny("has " + std::to_string(left) + " of " + std::to_string(l.budget_tokens) +
                  " tokens left (in flight included); this request may use up to " + std::to_string(tokens));
    }
    if (l.budget_cost > 0 && e.u.spent_cost + e.u.reserved_cost + cost > l.budget_cost + 1e-12) {
      const double left = std::max(0.0, l.budget_cost - e.u.spent_cost - e.u.reserved_cost);
      return deny("has " + Num(left) + " of " + Num(l.budget_cost) +
                  " cost left (in flight included); this request may cost up to " + Num(cost));
    }
  }
  for (const BudgetScope& s : scopes) {
    if (!s.limits->HasBudget()) continue;
    Entry& e = entries_[s.name];
    e.u.reserved_tokens += tokens;
    e.u.reserved_cost += cost;
    r.parts.push_back({s.name, e.u.period_start});
  }
  return r;
}

void BudgetLedger::Settle(const BudgetReservation& r, int64_t tokens, double cost) {
  if (r.parts.empty()) return;
  const int64_t now = wall_seconds_();
  std::lock_guard<std::mutex> lock(mu_);
  for (const BudgetReservation::Part& p : r.parts) {
    Entry& e = entries_[p.name];
    e.u.reserved_tokens = std::max<int64_t>(0, e.u.reserved_tokens - r.tokens);
    e.u.reserved_cost = std::max(0.0, e.u.reserved_cost - r.cost);
    RollLocked(e, now);
    if (tokens != 0 || cost != 0) {
      e.u.spent_tokens += tokens;
      e.u.spent_cost += cost;
      e.dirty = true;
    }
  }
}

BudgetUsage BudgetLedger::Usage(const std::string& scope) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = entries_.find(scope);
  return it == entries_.end() ? BudgetUsage{} : it->second.u;
}

Status BudgetLedger::Flush() {
  if (store_ == nullptr) return OkStatus();
  std::lock_guard<std::mutex> flush_lock(flush_mu_);
  std::vector<store::WriteOp> ops;
  std::vector<std::string> names;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [scope, e] : entries_) {
      if (!e.dirty) continue;
      store::json o = {{"apiVersion", "aicloud/v1"},
                       {"kind", kKind},
                       {"metadata", {{"name", ObjectName(scope)}, {"tenant", e.tenant}}},
                       {"spec", {{"scope", scope}, {"periodStart", e.u.period_start}, {"periodSeconds", e.period_s}}},
                       {"status", {{"spentTokens", e.u.spent_tokens}, {"spentCost", e.u.spent_cost}}}};
      ops.push_back(e.stored ? store::WriteOp::Update(std::move(o), 0) : store::WriteOp::Create(std::move(o)));
      names.push_back(scope);
      e.dirty = false;
    }
  }
  if (ops.empty()) return OkStatus();
  StatusOr<std::vector<store::json>> done = store_->Commit(ops);
  if (done.ok()) {
    std::lock_guard<std::mutex> lock(mu_);
    for (const std::string& n : names) entries_[n].stored = true;
    return OkStatus();
  }
  // One op failed (e.g. an object created elsewhere meanwhile): write them one by one, upserting.
  Status first;
  for (size_t i = 0; i < ops.size(); ++i) {
    store::WriteOp& op = ops[i];
    StatusOr<store::json> w = op.type == store::WriteOp::Type::kCreate ? store_->Create(op.object)
                                                                        : store_->Update(op.object, 0);
    if (!w.ok() && (w.status().code() == StatusCode::kAlreadyExists || w.status().code() == StatusCode::kNotFound)) {
      w = op.type == store::WriteOp::Type::kCreate ? store_->Update(op.object, 0) : store_->Create(op.object);
    }
    std::lock_guard<std::mutex> lock(mu_);
    if (w.ok()) {
      entries_[names[i]].stored = true;
    } else {
      entries_[names[i]].dirty = true;  // try again next flush
      if (first.ok()) first = w.status();
    }
  }
  return first;
}

}  // namespace aicloud::gateway
