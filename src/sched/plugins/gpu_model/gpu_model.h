// gpu_model: GPU work lands only on nodes whose GPU model the request allows.
#pragma once

#include "sched/registry.h"

namespace aicloud::sched {
void RegisterGpuModel(Registry& r);
}  // namespace aicloud::sched
