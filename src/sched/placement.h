// GPU placement inside one node: which GPUs of a node can serve a request, the default choice
// among them, and turning a choice into an Allocation. Shared by the filter and score plugins so
// they agree on what "fits" means.
#pragma once

#include <cstdint>

#include "cluster/node.h"
#include "sched/framework.h"
#include "sched/request.h"

namespace aicloud::sched {

// GPUs (mask) on `node` that could individually serve one unit of `pod`'s GPU request:
// whole-free GPUs for kWhole, GPUs with enough free milli and memory for kFraction, GPUs where
// the MIG profile fits for kMig. `facts` is the node model's facts (MIG geometry).
uint64_t UsableGpus(const PodRequest& pod, const cluster::Node& node, const ModelFacts& facts);

// True when the node's GPUs can hold the whole request (count, and for kNvlink topology, all in
// one NVLink domain). CPU and memory are not checked here.
bool GpusFit(const PodRequest& pod, const cluster::Node& node, const ModelFacts& facts);

// The framework's choice when no score plugin picks: the tightest GPU for a fraction, the
// fullest NVLink domain that fits for whole GPUs (lowest indices first), a GPU already
// partitioned for MIG before an empty one. REQUIRES: GpusFit().
GpuPick DefaultPick(const PodRequest& pod, const cluster::Node& node, const ModelFacts& facts);

// The Allocation that places `pod` on `node` using `pick`.
cluster::Allocation MakeAllocation(const PodRequest& pod, const cluster::Node& node,
                                   const GpuPick& pick, const ModelFacts& facts);

// Power a placement draws, charged against the rack budget: each GPU's TDP times its share.
double PlacementPowerKw(const PodRequest& pod, const ModelFacts& facts);

}  // namespace aicloud::sched
