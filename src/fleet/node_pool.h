// Node autoscaling pieces: where GPU nodes come from (NodeProvider), a simulated provider with a
// warm pool, and the rule that gives idle nodes back.
//
// The deployment controller asks for nodes when replicas cannot be placed and releases nodes
// that stayed empty. Real providers (a cloud API, a bare-metal pool, the cluster's own cordoned
// spares) implement NodeProvider; WarmPoolProvider is the simulator's and the tests' one:
//
//   WarmPoolProvider p({.provision_delay_s = 180, .warm_pool_size = 2, .warm_start_s = 10});
//   std::vector<NodeGrant> g = p.Request(3, now_s);   // 2 ready at now+10, 1 at now+180
//   ... p.Release(g[0].node_id, later_s);             // back to the warm pool (or returned)
//
// GCE provisions a GPU node in "usually 3 to 4 minutes" (cluster-autoscaler FAQ), hence the
// 180 s default; a warm-pool node is already provisioned with drivers and weights staged
// (the CapacityBuffer idea, autoscaling-anchors.md D.5) and only has to be handed over.
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <vector>

namespace aicloud::fleet {

struct NodeGrant {
  std::string node_id;
  double ready_at_s = 0;
  bool from_warm_pool = false;
};

// Not thread-safe; the controller calls it from its own loop. Time is passed in.
class NodeProvider {
 public:
  virtual ~NodeProvider() = default;
  // Asks for `n` nodes at now_s; each grant says when that node can take work.
  virtual std::vector<NodeGrant> Request(int n, double now_s) = 0;
  // The node is no longer needed from now_s.
  virtual void Release(const std::string& node_id, double now_s) = 0;
};

struct WarmPoolConfig {
  double provision_delay_s = 180;
  int warm_pool_size = 0;      // nodes kept provisioned and idle, handed out first
  double warm_start_s = 10;    // hand-over time of a warm node
};

class WarmPoolProvider final : public NodeProvider {
 public:
  explicit WarmPoolProvider(WarmPoolConfig config);

  std::vector<NodeGrant> Request(int n, double now_s) override;
  void Release(const std::string& node_id, double now_s) override;

  // Warm nodes ready (or still provisioning towards the pool) at now_s.
  int WarmAvailable(double now_s) const;
  // Node-seconds paid so far up to now_s: nodes handed out plus warm-pool nodes (idle capacity
  // is not free).
  double NodeSeconds(double now_s) const;
  double WarmIdleSeconds(double now_s) const;
  int64_t provisioned() const { return next_id_; }

 private:
  std::string NewId() { return "node-" + std::to_string(next_id_++); }
  void Refill(double now_s);

  WarmPoolConfig config_;
  int64_t next_id_ = 0;
  std::vector<std::pair<std::string, double>> warm_;  // (id, ready_at) in the pool
  std::map<std::string, double> in_use_;              // id -> since
  double closed_node_s_ = 0;                          // finished intervals, in use
  double closed_warm_s_ = 0;                          // finished intervals, idle in the pool
  std::map<std::string, double> warm_since_;          // id -> entered the pool (paid from then)
};

// The scale-down rule: a node with nothing on it for longer than `idle_release_s` is released
// (cluster-autoscaler's scale-down-unneeded-time is 10 min; Karpenter's consolidateAfter is 0 s).
struct NodeUsage {
  std::string node_id;
  int used_slots = 0;
  double idle_since_s = 0;  // when used_slots last became 0
};

// Nodes to release at now_s, in input order.
std::vector<std::string> IdleNodesToRelease(std::span<const NodeUsage> nodes, double now_s,
                                            double idle_release_s = 600);

}  // namespace aicloud::fleet
