#include "cluster/cluster.h"

#include <algorithm>

namespace aicloud::cluster {

ModelId Cluster::InternModel(std::string_view name) {
  auto it = model_index_.find(std::string(name));
  if (it != model_index_.end()) return it->second;
  ModelId id = static_cast<ModelId>(models_.size());
  models_.emplace_back(name);
  model_index_.emplace(std::string(name), id);
  return id;
}

ModelId Cluster::FindModel(std::string_view name) const {
  auto it = model_index_.find(std::string(name));
  return it == model_index_.end() ? kNoModel : it->second;
}

int32_t Cluster::AddNode(Node node) {
  node.id = static_cast<int32_t>(nodes_.size());
  if (node.cpu_free_milli == 0) node.cpu_free_milli = node.cpu_milli;
  if (node.mem_free_mib == 0) node.mem_free_mib = node.mem_mib;
  for (Gpu& g : node.gpus) {
    if (g.mem_free_mib == 0) g.mem_free_mib = g.mem_mib;
  }
  node_index_.emplace(node.name, node.id);
  change_log_.push_back(node.id);
  nodes_.push_back(std::move(node));
  return nodes_.back().id;
}

int32_t Cluster::AddRack(Rack rack) {
  int32_t id = static_cast<int32_t>(racks_.size());
  rack_index_.emplace(rack.name, id);
  racks_.push_back(std::move(rack));
  return id;
}

int32_t Cluster::FindNode(std::string_view name) const {
  auto it = node_index_.find(std::string(name));
  return it == node_index_.end() ? -1 : it->second;
}

int32_t Cluster::FindRack(std::string_view name) const {
  auto it = rack_index_.find(std::string(name));
  return it == rack_index_.end() ? -1 : it->second;
}

Status Cluster::Allocate(const Allocation& a) {
  if (a.node < 0 || a.node >= static_cast<int32_t>(nodes_.size())) {
    return InvalidArgumentError("allocation names node " + std::to_string(a.node) +
                                " which does not exist");
  }
  Node& n = nodes_[a.node];
  if (a.cpu_milli < 0 || a.mem_mib < 0 || a.power_kw < 0) {
    return InvalidArgumentError(n.name + ": allocation with a negative amount");
  }
  if (a.cpu_milli > n.cpu_free_milli) return ResourceExhaustedError(n.name + ": not enough CPU");
  if (a.mem_mib > n.mem_free_mib) return ResourceExhaustedError(n.name + ": not enough memory");
  for (const GpuShare& s : a.gpus) {
    if (s.gpu < 0 || s.gpu >= n.gpu_count()) {
      return InvalidArgumentError(n.name + ": no GPU " + std::to_string(s.gpu));
    }
    const Gpu& g = n.gpus[s.gpu];
    if (s.milli < 0 || s.mem_mib < 0) {
      return InvalidArgumentError(n.name + ": allocation with a negative amount");
    }
    if (s.mig_profile >= 0) {
      if (s.mig_start < 0 || s.mig_slices <= 0 || s.mig_compute < 0 ||
          s.mig_start + s.mig_slices > kMigMemorySlices) {
        return InvalidArgumentError(n.name + ": MIG instance outside the GPU's slices");
      }
      uint8_t mask = static_cast<uint8_t>(((1u << s.mig_slices) - 1u) << s.mig_start);
      if ((g.mig_used_mask & mask) != 0 || g.mig_compute_used + s.mig_compute > 7) {
        return ResourceExhaustedError(n.name + ": MIG slices already in use on GPU " +
                                      std::to_string(s.gpu));
      }
      if (!g.mig_active() && g.free_milli != kMilliPerGpu) {
        return ResourceExhaustedError(n.name + ": GPU " + std::to_string(s.gpu) +
                                      " is shared and cannot be partitioned");
      }
    } else {
      if (g.mig_active()) {
        return ResourceExhaustedError(n.name + ": GPU " + std::to_string(s.gpu) +
                                      " is partitioned into MIG instances");
      }
      if (s.milli > g.free_milli) {
        return ResourceExhaustedError(n.name + ": GPU " + std::to_string(s.gpu) +
                                      " has not enough free share");
      }
      if (s.mem_mib > g.mem_free_mib) {
        return ResourceExhaustedError(n.name + ": GPU " + std::to_string(s.gpu) +
                                      " has not enough free memory");
      }
    }
  }
  // Two shares in one allocation on the same GPU are not allowed: it would bypass the checks.
  for (size_t i = 0; i < a.gpus.size(); ++i) {
    for (size_t j = i + 1; j < a.gpus.size(); ++j) {
      if (a.gpus[i].gpu == a.gpus[j].gpu) {
        return InvalidArgumentError(n.name + ": allocation names GPU " +
                                    std::to_string(a.gpus[i].gpu) + " twice");
      }
    }
  }
  if (n.rack >= 0 && a.power_kw > 0) {
    Rack& r = racks_[n.rack];
    if (r.power_budget_kw > 0 && r.power_used_kw + a.power_kw > r.power_budget_kw + 1e-9) {
      return ResourceExhaustedError(r.name + ": rack power budget exceeded");
    }
    r.power_used_kw += a.power_kw;
  }
  Apply(a);
  return OkStatus();
}

void Cluster::Restore(const Allocation& a) {
  Node& n = nodes_[a.node];
  if (n.rack >= 0 && a.power_kw > 0) racks_[n.rack].power_used_kw += a.power_kw;
  Apply(a);
}

void Cluster::Apply(const Allocation& a) {
  Node& n = nodes_[a.node];
  n.cpu_free_milli -= a.cpu_milli;
  n.mem_free_mib -= a.mem_mib;
  for (const GpuShare& s : a.gpus) {
    Gpu& g = n.gpus[s.gpu];
    if (s.mig_profile >= 0) {
      g.mig_used_mask |= static_cast<uint8_t>(((1u << s.mig_slices) - 1u) << s.mig_start);
      g.mig_compute_used = static_cast<int8_t>(g.mig_compute_used + s.mig_compute);
      ++g.mig_instances;
      // A partitioned GPU is not available to time-sliced or whole-GPU work.
      g.free_milli = 0;
    } else {
      g.free_milli -= s.milli;
      g.mem_free_mib -= s.mem_mib;
      if (s.milli < kMilliPerGpu) ++g.shares;
    }
  }
  ++n.pods;
  ++n.version;
  change_log_.push_back(n.id);
}

void Cluster::Release(const Allocation& a) {
  Node& n = nodes_[a.node];
  n.cpu_free_milli += a.cpu_milli;
  n.mem_free_mib += a.mem_mib;
  for (const GpuShare& s : a.gpus) {
    Gpu& g = n.gpus[s.gpu];
    if (s.mig_profile >= 0) {
      g.mig_used_mask &= static_cast<uint8_t>(~(((1u << s.mig_slices) - 1u) << s.mig_start));
      g.mig_compute_used = static_cast<int8_t>(g.mig_compute_used - s.mig_compute);
      if (--g.mig_instances == 0) g.free_milli = kMilliPerGpu;
    } else {
      g.free_milli += s.milli;
      g.mem_free_mib += s.mem_mib;
      if (s.milli < kMilliPerGpu) --g.shares;
    }
  }
  if (n.rack >= 0 && a.power_kw > 0) racks_[n.rack].power_used_kw -= a.power_kw;
  --n.pods;
  ++n.version;
  change_log_.push_back(n.id);
}

void Cluster::Touch(int32_t node) {
  ++nodes_[node].version;
  change_log_.push_back(node);
}

void Cluster::TrimChangeLog(uint64_t position) {
  if (position <= change_log_base_) return;
  const uint64_t drop = std::min<uint64_t>(position - change_log_base_, change_log_.size());
  change_log_.erase(change_log_.begin(), change_log_.begin() + static_cast<std::ptrdiff_t>(drop));
  change_log_base_ += drop;
}

int64_t Cluster::total_gpus() const {
  int64_t s = 0;
  for (const Node& n : nodes_) s += n.gpu_count();
  return s;
}

int64_t Cluster::allocated_gpu_milli() const {
  int64_t s = 0;
  for (const Node& n : nodes_) {
    for (const Gpu& g : n.gpus) {
      // A partitioned GPU counts by the compute slices its instances hold.
      s += g.mig_active() ? (kMilliPerGpu * g.mig_compute_used) / 7 : kMilliPerGpu - g.free_milli;
    }
  }
  return s;
}

}  // namespace aicloud::cluster
