// Job: a gang of N identical workers that run a command as supervised processes on the nodes the
// scheduler picks. This file turns a Job's `spec` into the typed form the controller uses and into
// the scheduler's PodRequests.
//
//   spec:
//     workers: 2                      # gang size (default 1); all start or none
//     command: "python train.py"      # or a list: ["python", "train.py"]
//     env: {EPOCHS: "3"}
//     resources: {cpu: "2", memory: 4Gi, gpu: {count: 1, model: H100}}
//                                     # gpu forms: {count, model, topology: none|node|nvlink|rack},
//                                     # {profile: 3g.40gb}, {fraction: 0.25, memoryGiB: 10}
//     restartPolicy: OnFailure        # or Never (default)
//     maxRetries: 3
//     priority: 10                    # higher runs first and may preempt lower
//     queue: research                 # the tenant queue (quota); default: the tenant's name
//     preemptible: true
//     terminationGraceSeconds: 10
//     isolation: network              # none (default) or network: each worker gets its own
//                                     # network namespace with only loopback (no other host,
//                                     # not even the node's 127.0.0.1). Every worker also runs
//                                     # in the node's tenant sandbox (docs/control-plane.md).
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/status.h"
#include "sched/request.h"

namespace aicloud::control {

struct JobSpec {
  int workers = 1;
  int min_available = 0;  // 0 = all workers
  std::vector<std::string> argv;
  std::map<std::string, std::string> env;
  std::string working_dir;
  int64_t cpu_milli = 1000;
  int64_t mem_mib = 1024;
  bool limits_given = false;  // resources.cpu and resources.memory both set
  // GPU request of each worker.
  sched::GpuKind gpu_kind = sched::GpuKind::kNone;
  int gpu_count = 0;
  int32_t gpu_milli = 0;
  int64_t gpu_mem_mib = 0;
  std::string mig_profile;
  std::vector<std::string> gpu_models;  // canonical catalog names
  sched::Topology topology = sched::Topology::kNone;
  std::string restart_policy = "Never";  // Never | OnFailure
  int max_retries = 0;
  int priority = 0;
  std::string queue;
  bool preemptible = true;
  int grace_seconds = 10;
  std::string pool;
  std::vector<sched::Toleration> tolerations;
  std::string isolation = "none";  // none | network

  // GPUs each worker holds, in whole-GPU units (a fraction counts its share; a MIG instance its
  // compute slices out of 7). Used for accounting and quotas.
  double GpusPerWorker() const;
};

// Parses and checks a Job spec (already schema-validated for types). INVALID_ARGUMENT with the
// field path: "spec.resources.gpu.profile: 5g.10gb is not a MIG profile of any GPU in the catalog".
StatusOr<JobSpec> ParseJobSpec(const nlohmann::json& spec);

// The scheduler request for one worker (name "<tenant>/<job>/<worker>", gang set when workers>1).
sched::PodRequest WorkerRequest(const JobSpec& spec, const std::string& tenant,
                                const std::string& job, int worker);

}  // namespace aicloud::control
