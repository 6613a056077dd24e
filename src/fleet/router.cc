#include "fleet/router.h"

#include <algorithm>
#include <limits>

namespace aicloud::fleet {
namespace {

Status NoneReady() { return UnavailableError("no ready replica"); }

int InFlight(const ReplicaView& r) { return r.running + r.queue_depth; }

class RoundRobinRouter final : public Router {
 public:
  std::string_view name() const override { return "round-robin"; }
  StatusOr<size_t> Pick(const RouteRequest&, std::span<const ReplicaView> replicas) override {
    const size_t n = replicas.size();
    for (size_t k = 0; k < n; ++k) {
      const size_t i = (next_ + k) % n;
      if (replicas[i].ready) {
        next_ = i + 1;
        return i;
      }
    }
    return NoneReady();
  }

 private:
  size_t next_ = 0;
};

class LeastRequestRouter final : public Router {
 public:
  std::string_view name() const override { return "least-request"; }
  StatusOr<size_t> Pick(const RouteRequest&, std::span<const ReplicaView> replicas) override {
    size_t best = replicas.size();
    for (size_t i = 0; i < replicas.size(); ++i) {
      if (!replicas[i].ready) continue;
      if (best == replicas.size() || InFlight(replicas[i]) < InFlight(replicas[best])) best = i;
    }
    if (best == replicas.size()) return NoneReady();
    return best;
  }
};

// Ready replicas, without the saturated ones unless all are.
std::vector<size_t> Candidates(std::span<const ReplicaView> replicas, const RouterConfig& c) {
  std::vector<size_t> ready, unsaturated;
  for (size_t i = 0; i < replicas.size(); ++i) {
    if (!replicas[i].ready) continue;
    ready.push_back(i);
    if (replicas[i].queue_depth <= c.saturation_queue && replicas[i].kv_usage < c.saturation_kv) {
      unsaturated.push_back(i);
    }
  }
  return unsaturated.empty() ? ready : unsaturated;
}

double LoraAffinity(const ReplicaView& r, const std::string& adapter) {
  if (adapter.empty()) return 1;
  if (std::find(r.adapters.begin(), r.adapters.end(), adapter) != r.adapters.end()) return 1;
  if (static_cast<int>(r.adapters.size()) < r.max_adapters) return 0.8;  // a free slot
  return 0;
}

// Prefix affinity first, load second.
class PrefixRouter final : public Router {
 public:
  explicit PrefixRouter(const RouterConfig& c) : config_(c), index_(c.prefix_capacity_blocks, c.max_prefix_blocks) {}
  std::string_view name() const override { return "prefix"; }
  StatusOr<size_t> Pick(const RouteRequest& req, std::span<const ReplicaView> replicas) override {
    const std::vector<size_t> cands = Candidates(replicas, config_);
    if (cands.empty()) return NoneReady();
    size_t best = cands[0];
    int best_hit = -1;
    for (size_t i : cands) {
      const int hit = index_.MatchedBlocks(replicas[i].id, req.prefix_hashes);
      if (hit > best_hit || (hit == best_hit && InFlight(replicas[i]) < InFlight(replicas[best]))) {
        best = i;
        best_hit = hit;
      }
    }
    index_.Record(replicas[best].id, req.prefix_hashes);
    return best;
  }
  void RemoveReplica(std::string_view id) override { index_.RemoveReplica(id); }

 private:
  RouterConfig config_;
  PrefixIndex index_;
};

// GIE's endpoint picker: weighted sum of normalized scorers, max-score picker.
class ScoreRouter final : public Router {
 public:
  explicit ScoreRouter(const RouterConfig& c) : config_(c), index_(c.prefix_capacity_blocks, c.max_prefix_blocks) {}
  std::string_view name() const override { return "score"; }
  StatusOr<size_t> Pick(const RouteRequest& req, std::span<const ReplicaView> replicas) override {
    const std::vector<size_t> cands = Candidates(replicas, config_);
    if (cands.empty()) return NoneReady();
    int min_q = std::numeric_limits<int>::max(), max_q = 0;
    for (size_t i : cands) {
      min_q = std::min(min_q, replicas[i].queue_depth);
      max_q = std::max(max_q, replicas[i].queue_depth);
    }
    const ScoreWeights& w = config_.weights;
    const int blocks = std::min(static_cast<int>(req.prefix_hashes.size()), config_.max_prefix_blocks);
    size_t best = cands[0];
    double best_score = -std::numeric_limits<double>::infinity();
    for (size_t i : cands) {
      const ReplicaView& r = replicas[i];
      // queue-scorer: min-max normalized, all 1 when every queue is equal.
      const double queue = max_q == min_q ? 1.0 : static_cast<double>(max_q - r.queue_depth) / (max_q - min_q);
      // kv-cache-utilization-scorer.
      const double kv = 1 - std::clamp(r.kv_usage, 0.0, 1.0);
      // prefix-cache-scorer: share of the prompt's blocks believed cached.
      const double prefix = blocks == 0 ? 0 : static_cast<double>(index_.MatchedBlocks(r.id, req.prefix_hashes)) / blocks;
      const double score = w.queue * queue + w.kv * kv + w.prefix * prefix + w.lora * LoraAffinity(r, req.adapter);
      if (score > best_score) {
        best_score = score;
        best = i;
      }
    }
    index_.Record(replicas[best].id, req.prefix_hashes);
    return best;
  }
  void RemoveReplica(std::string_view id) override { index_.RemoveReplica(id); }

 private:
  RouterConfig config_;
  PrefixIndex index_;
};

}  // namespace

std::vector<std::string> RouterNames() { return {"round-robin", "least-request", "prefix", "score"}; }

StatusOr<std::unique_ptr<Router>> MakeRouter(std::string_view policy, const RouterConfig& config) {
  if (policy == "round-robin") return std::unique_ptr<Router>(std::make_unique<RoundRobinRouter>());
  if (policy == "least-request") return std::unique_ptr<Router>(std::make_unique<LeastRequestRouter>());
  if (policy == "prefix") return std::unique_ptr<Router>(std::make_unique<PrefixRouter>(config));
  if (policy == "score") return std::unique_ptr<Router>(std::make_unique<ScoreRouter>(config));
  return InvalidArgumentError("unknown routing policy '" + std::string(policy) +
                              "' (known: round-robin, least-request, prefix, score)");
}

}  // namespace aicloud::fleet
