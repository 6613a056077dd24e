// rack_power: a placement may not push its rack past the rack's power budget (kW). GPU power is
// charged at TDP × share (placement.h). Not node-local: the budget is shared by the rack.
#pragma once

#include "sched/registry.h"

namespace aicloud::sched {
void RegisterRackPower(Registry& r);
}  // namespace aicloud::sched
