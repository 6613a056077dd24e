// Cluster: the set of nodes, racks and GPU models the scheduler places work on.
//
// Thread-compatible: the scheduler owns one Cluster and mutates it from one thread; readers on
// other threads must synchronise externally.
//
//   Cluster c;
//   ModelId h100 = c.InternModel("H100-SXM");
//   Node n; n.name = "n0"; n.model = h100; ...
//   c.AddNode(std::move(n));
//   Status s = c.Allocate(alloc);   // checks capacity, never over-allocates
#pragma once

#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "cluster/node.h"
#include "core/status.h"

namespace aicloud::cluster {

class Cluster {
 public:
  // Returns the id of a GPU model name, adding it when new.
  ModelId InternModel(std::string_view name);
  // kNoModel when unknown.
  ModelId FindModel(std::string_view name) const;
  const std::string& model_name(ModelId id) const { return models_[id]; }
  const std::vector<std::string>& models() const { return models_; }

  // Adds a node and returns its id. Its free counters start at capacity unless already set.
  int32_t AddNode(Node node);
  int32_t AddRack(Rack rack);
  // -1 when absent.
  int32_t FindNode(std::string_view name) const;
  int32_t FindRack(std::string_view name) const;

  std::vector<Node>& nodes() { return nodes_; }
  const std::vector<Node>& nodes() const { return nodes_; }
  Node& node(int32_t id) { return nodes_[id]; }
  const Node& node(int32_t id) const { return nodes_[id]; }
  std::vector<Rack>& racks() { return racks_; }
  const std::vector<Rack>& racks() const { return racks_; }

  // Applies an allocation. Fails (and changes nothing) if any counter would go negative, a MIG
  // instance overlaps another, or the rack's power budget would be exceeded.
  Status Allocate(const Allocation& a);
  // Returns what Allocate took. REQUIRES: `a` was allocated and not yet released.
  void Release(const Allocation& a);
  // Re-applies an allocation that was just released, without admission checks (a rack budget
  // lowered in between must not turn an undo into a failure). REQUIRES: `a` was allocated,
  // then released, and nothing was placed on its GPUs since.
  void Restore(const Allocation& a);

  // Records that a node's schedulable fields changed outside Allocate/Release (cordon, taints,
  // labels): bumps its version and logs it. Every such change must go through here so caches
  // keyed on node versions stay true.
  void Touch(int32_t node);
  // Ids of nodes in the order their versions were bumped, for caches that follow changes
  // incrementally (the scheduler's per-shape index). Entries before change_log_base() were
  // dropped by TrimChangeLog.
  const std::vector<int32_t>& change_log() const { return change_log_; }
  uint64_t change_log_base() const { return change_log_base_; }
  // Drops log entries older than `position` (an absolute position, base + index).
  void TrimChangeLog(uint64_t position);

  int64_t total_gpus() const;
  int64_t total_gpu_milli() const { return total_gpus() * kMilliPerGpu; }
  // GPU milli currently allocated (whole, fractional and MIG use all count their milli).
  int64_t allocated_gpu_milli() const;

 private:
  std::vector<std::string> models_;
  std::unordered_map<std::string, ModelId> model_index_;
  std::vector<Node> nodes_;
  std::unordered_map<std::string, int32_t> node_index_;
  std::vector<Rack> racks_;
  std::unordered_map<std::string, int32_t> rack_index_;
  void Apply(const Allocation& a);

  std::vector<int32_t> change_log_;
  uint64_t change_log_base_ = 0;
};

}  // namespace aicloud::cluster
