// rack_power: a placement may not push its rack past the rack's power budget (kW). GPU power is
// charged at TDP × share (placement.h). In every default profile. Not node-local when any rack
// has a budget (the budget is shared by the rack), which turns the score index off.
#pragma once

#include "sched/registry.h"

namespace aicloud::sched {
void RegisterRackPower(Registry& r);
}  // namespace aicloud::sched
