// random: every feasible node gets a random score, so the chosen node is uniform among the
// feasible ones; a fractional request gets a uniformly random fitting GPU. The FGD paper's Random
// baseline, and a floor for every other policy.
#pragma once

#include "sched/registry.h"

namespace aicloud::sched {
void RegisterRandom(Registry& r);
}  // namespace aicloud::sched
