// `aicloud gpu-check`: on a node with a real GPU, reads MIG mode and the existing MIG instances
// through the agent's NVML code (nothing is created, destroyed or switched) and runs the memory
// wipe the agent uses between tenants on real memory: fill the free memory with a pattern, wipe
// it, read back zeros, report bytes, time and GB/s. One JSON document on stdout.
// (`aicloud gpu-wipe`, the agent's wipe helper, is dispatched in main.cc before option parsing.)
#include <stdlib.h>

#include <iostream>
#include <memory>

#include "agent/gpu_wipe.h"
#include "agent/nvml_mig.h"
#include "cli/cli_util.h"
#include "cli/commands.h"

namespace aicloud::cli {

using nlohmann::json;

void AddGpu(CLI::App& app, int* exit_code) {
  auto nvml = std::make_shared<std::string>("libnvidia-ml.so.1");
  auto cuda = std::make_shared<std::string>("libcuda.so.1");
  auto device = std::make_shared<std::string>();
  auto no_wipe = std::make_shared<bool>(false);
  auto* c = app.add_subcommand("gpu-check",
                               "Read MIG state (read only) and test the tenant memory wipe on this node's GPU");
  c->add_option("--nvml-library", *nvml, "NVML library (default libnvidia-ml.so.1)");
  c->add_option("--cuda-library", *cuda, "CUDA driver library (default libcuda.so.1)");
  c->add_option("--device", *device,
                "GPU-<uuid>, MIG-<uuid> or CUDA index to wipe (default: GPU 0 when it is not in MIG mode)");
  c->add_flag("--no-wipe", *no_wipe, "only read the MIG state");
  c->callback([=] {
    json out = {{"gpus", json::array()}};
    StatusOr<std::unique_ptr<agent::NvmlMig>> n = agent::NvmlMig::Open(*nvml);
    std::string target = *device;
    if (!n.ok()) {
      out["nvmlError"] = n.status().message();
    } else {
      StatusOr<int> count = (*n)->DeviceCount();
      for (int i = 0; count.ok() && i < *count; ++i) {
        json g = {{"index", i}};
        if (StatusOr<std::string> name = (*n)->Name(i); name.ok()) g["name"] = *name;
        if (StatusOr<std::string> uuid = (*n)->Uuid(i); uuid.ok()) g["uuid"] = *uuid;
        StatusOr<bool> mig = (*n)->MigEnabled(i);
        g["migEnabled"] = mig.ok() && *mig;
        if (mig.ok() && *mig) {
          json list = json::array();
          StatusOr<std::vector<agent::MigInstance>> l = (*n)->List(i);
          for (const agent::MigInstance& m : l.ok() ? *l : std::vector<agent::MigInstance>{}) {
            list.push_back({{"gpuInstance", m.gi_id}, {"profile", m.profile_id}, {"start", m.start},
                            {"size", m.size}, {"computeInstances", m.ci_ids}, {"uuid", m.uuid}});
          }
          g["migInstances"] = list;
          if (!l.ok()) g["migError"] = l.status().message();
        }
        if (i == 0 && target.empty() && !(mig.ok() && *mig) && g.contains("uuid")) target = g["uuid"];
        out["gpus"].push_back(g);
      }
    }
    if (!*no_wipe) {
      if (target.empty()) {
        out["wipe"] = {{"ok", false}, {"error", "no device to wipe: GPU 0 is in MIG mode or absent; give --device"}};
      } else {
        if (target.find(':') == std::string::npos) ::setenv("CUDA_VISIBLE_DEVICES", target.c_str(), 1);
        StatusOr<agent::WipeResult> w =
            agent::WipeDeviceMemory(*cuda, target, agent::WipeOptions{.check = true});
        if (w.ok()) {
          out["wipe"] = {{"ok", true}, {"device", target}, {"bytes", w->bytes}, {"ms", w->ms},
                         {"memsetMs", w->memset_ms}, {"chunks", w->chunks},
                         {"verifiedZeroBytes", w->verified_bytes},
                         {"memsetGBps", w->memset_ms > 0 ? w->bytes / 1e6 / w->memset_ms : 0.0}};
        } else {
          out["wipe"] = {{"ok", false}, {"device", target}, {"error", w.status().message()}};
        }
      }
    }
    std::cout << out.dump(2) << std::endl;
    *exit_code = (out.contains("wipe") && !out["wipe"]["ok"].get<bool>()) ? 1 : 0;
  });
}

}  // namespace aicloud::cli
