#include "agent/gpu_isolation.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "agent/gpu_discovery.h"
#include "agent/gpu_wipe.h"
#include "cluster/catalog.h"

namespace aicloud::agent {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
constexpr int kSlices = 8;  // MIG memory slices per GPU (NVIDIA MIG user guide, "Concepts")

json Event(const std::string& type, const std::string& reason, const std::string& message,
           const std::string& tenant, const std::string& job, int gpu) {
  if (type == "Warning") {
    spdlog::warn("agent: {}: {}", reason, message);
  } else {
    spdlog::info("agent: {}: {}", reason, message);
  }
  return {{"type", type}, {"reason", reason}, {"message", message}, {"tenant", tenant},
          {"job", job}, {"gpu", gpu}};
}

std::string GiB(int64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f GiB", static_cast<double>(bytes) / (1 << 30));
  return buf;
}

std::string Join(const std::set<std::string>& s) {
  std::string out;
  for (const std::string& x : s) out += (out.empty() ? "" : ", ") + x;
  return out;
}

// One assigned GPU entry, validated.
struct Entry {
  int index = 0;
  int64_t milli = 1000, mem_mib = 0;
  int mig_start = -1;
  std::string mig_profile;
};

StatusOr<std::vector<Entry>> ParseEntries(const json& gpus) {
  if (gpus.is_null()) return std::vector<Entry>{};
  if (!gpus.is_array()) return InvalidArgumentError("\"gpus\" is not an array");
  std::vector<Entry> out;
  std::set<std::pair<int, int>> seen;
  for (size_t i = 0; i < gpus.size(); ++i) {
    const json& g = gpus[i];
    const std::string at = "gpus[" + std::to_string(i) + "]";
    if (!g.is_object()) return InvalidArgumentError(at + " is not an object");
    Entry e;
    auto integer = [&](const char* key, int64_t dflt, int64_t lo, int64_t hi) -> StatusOr<int64_t> {
      if (!g.contains(key)) return dflt;
      if (!g[key].is_number_integer()) return InvalidArgumentError(at + "." + key + " is not an integer");
      const int64_t v = g[key].get<int64_t>();
      if (v < lo || v > hi) {
        return InvalidArgumentError(at + "." + key + " = " + std::to_string(v) + " is outside [" +
                                    std::to_string(lo) + ", " + std::to_string(hi) + "]");
      }
      return v;
    };
    StatusOr<int64_t> index = integer("index", -1, 0, 1023);
    if (!index.ok()) return index.status();
    if (!g.contains("index")) return InvalidArgumentError(at + ".index is missing");
    StatusOr<int64_t> milli = integer("milli", 1000, 1, 1000);
    if (!milli.ok()) return milli.status();
    StatusOr<int64_t> mem = integer("memMiB", 0, 0, int64_t{1} << 30);
    if (!mem.ok()) return mem.status();
    StatusOr<int64_t> start = integer("migStart", -1, -1, kSlices - 1);
    if (!start.ok()) return start.status();
    e.index = static_cast<int>(*index);
    e.milli = *milli;
    e.mem_mib = *mem;
    e.mig_start = static_cast<int>(*start);
    if (e.mig_start >= 0) {
      if (!g.contains("migProfile") || !g["migProfile"].is_string() ||
          g["migProfile"].get<std::string>().empty()) {
        return InvalidArgumentError(at + ".migProfile is missing for a MIG slice (migStart " +
                                    std::to_string(e.mig_start) + ")");
      }
      e.mig_profile = g["migProfile"].get<std::string>();
    }
    if (!seen.insert({e.index, e.mig_start}).second) {
      return InvalidArgumentError(at + " repeats GPU " + std::to_string(e.index));
    }
    out.push_back(std::move(e));
  }
  return out;
}

// Compute and memory slices of a profile name, for the GPU's model when it is known.
StatusOr<std::pair<int, int>> ProfileSlices(const std::string& model, const std::string& name,
                                            int start) {
  const cluster::MigGeometry* geo = model.empty() ? nullptr : cluster::FindMigGeometry(model);
  if (geo != nullptr) {
    const int p = cluster::FindMigProfile(*geo, name);
    if (p < 0) return InvalidArgumentError("\"" + name + "\" is not a MIG profile of " + model);
    const cluster::MigProfile& prof = geo->profiles[p];
    if (std::find(prof.starts.begin(), prof.starts.end(), start) == prof.starts.end()) {
      return InvalidArgumentError("start slot " + std::to_string(start) + " is not valid for " + name);
    }
    return std::make_pair(prof.compute_slices, prof.memory_slices);
  }
  // Model unknown (simulated node): the compute count in the name decides the placement size.
  const int compute = std::atoi(name.c_str());
  static const std::map<int, int> kSize = {{1, 1}, {2, 2}, {3, 4}, {4, 4}, {7, 8}};
  auto it = kSize.find(compute);
  if (it == kSize.end() || name.find('g') == std::string::npos) {
    return InvalidArgumentError("\"" + name + "\" is not a MIG profile name");
  }
  return std::make_pair(compute, it->second);
}

Status WriteAtomically(const std::string& path, const std::string& data) {
  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return InternalError("cannot write " + tmp + ": " + std::strerror(errno));
  size_t off = 0;
  while (off < data.size()) {
    const ssize_t n = ::write(fd, data.data() + off, data.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      ::close(fd);
      return InternalError("cannot write " + tmp + ": " + std::strerror(errno));
    }
    off += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) return InternalError("cannot sync " + tmp);
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    return InternalError("cannot rename " + tmp + ": " + std::strerror(errno));
  }
  const int dir = ::open(fs::path(path).parent_path().c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir >= 0) {
    (void)::fsync(dir);
    ::close(dir);
  }
  return OkStatus();
}

}  // namespace

GpuIsolation::GpuIsolation(GpuIsolationOptions options) : options_(std::move(options)) {}
GpuIsolation::~GpuIsolation() = default;

std::string GpuIsolation::StatePath() const {
  return (fs::path(options_.work_dir) / "gpu-state.json").string();
}

Status GpuIsolation::LoadLocked() {
  std::ifstream in(StatePath());
  if (!in) return OkStatus();  // first start
  std::stringstream ss;
  ss << in.rdbuf();
  try {
    const json j = json::parse(ss.str());
    all_dirty_ = j.value("allDirty", false);
    for (const auto& [key, g] : j.at("gpus").items()) {
      GpuState s;
      s.uuid = g.value("uuid", "");
      const json& slices = g.at("slices");
      for (int i = 0; i < kSlices && i < static_cast<int>(slices.size()); ++i) {
        s.slices[i] = slices[i].get<std::string>();
      }
      gpus_[std::stoi(key)] = s;
    }
    for (const json& c : j.at("instances")) {
      Created cr;
      cr.instance.gpu = c.at("gpu").get<int>();
      cr.instance.gpu_uuid = c.value("gpuUuid", "");
      cr.instance.gi_id = c.at("gi").get<unsigned>();
      cr.instance.profile_id = c.at("profile").get<unsigned>();
      cr.instance.start = c.at("start").get<int>();
      cr.instance.size = c.at("size").get<int>();
      cr.instance.uuid = c.value("uuid", "");
      cr.profile_name = c.value("profileName", "");
      for (const json& h : c.value("holders", json::array())) {
        cr.holders.push_back({h.value("attempt", ""), h.value("tenant", ""), h.value("job", "")});
      }
      created_.push_back(std::move(cr));
    }
  } catch (const std::exception& e) {
    gpus_.clear();
    created_.clear();
    all_dirty_ = true;  // who used which GPU is unknown now: wipe before anyone's first use
    const std::string aside = StatePath() + ".corrupt";
    std::error_code ec;
    fs::rename(StatePath(), aside, ec);
    return InternalError("GPU state " + StatePath() + " is unreadable (" + e.what() +
                         "); moved to " + aside + "; every GPU will be wiped before its next use");
  }
  return OkStatus();
}

Status GpuIsolation::SaveLocked() {
  json gpus = json::object();
  for (const auto& [index, g] : gpus_) gpus[std::to_string(index)] = {{"uuid", g.uuid}, {"slices", g.slices}};
  json instances = json::array();
  for (const Created& c : created_) {
    json holders = json::array();
    for (const Holder& h : c.holders) holders.push_back({{"attempt", h.attempt}, {"tenant", h.tenant}, {"job", h.job}});
    instances.push_back({{"gpu", c.instance.gpu}, {"gpuUuid", c.instance.gpu_uuid}, {"gi", c.instance.gi_id},
                         {"profile", c.instance.profile_id}, {"profileName", c.profile_name},
                         {"start", c.instance.start}, {"size", c.instance.size},
                         {"uuid", c.instance.uuid}, {"holders", holders}});
  }
  json j = {{"version", 1}, {"allDirty", all_dirty_}, {"gpus", gpus}, {"instances", instances}};
  std::error_code ec;
  fs::create_directories(options_.work_dir, ec);
  return WriteAtomically(StatePath(), j.dump(1) + "\n");
}

void GpuIsolation::Start(json* events) {
  std::lock_guard<std::mutex> l(mu_);
  if (Status s = LoadLocked(); !s.ok()) {
    spdlog::error("agent: {}", s.ToString());
    if (Status w = SaveLocked(); !w.ok()) spdlog::error("agent: {}", w.ToString());
  }
  if (options_.simulated) {
    created_.clear();
    return;
  }
  StatusOr<std::unique_ptr<NvmlMig>> nvml = NvmlMig::Open(options_.nvml_library);
  if (nvml.ok()) {
    nvml_ = std::move(*nvml);
  } else {
    nvml_error_ = nvml.status().message();
    spdlog::info("agent: no MIG management: {}", nvml_error_);
  }
  ReconcileLocked(events);
}

Status GpuIsolation::DestroyLocked(Created& c, json* events, const std::string& why) {
  const Holder last = c.holders.empty() ? Holder{} : c.holders.back();
  const std::string what = "GPU " + std::to_string(c.instance.gpu) + ": MIG instance " +
                           c.profile_name + " at slot " + std::to_string(c.instance.start) +
                           " (GPU instance " + std::to_string(c.instance.gi_id) + ", " + c.instance.uuid + ")";
  if (nvml_ == nullptr) {
    return UnavailableError(what + " cannot be destroyed: " + nvml_error_);
  }
  Status s = nvml_->Destroy(c.instance);
  if (s.ok() || s.code() == StatusCode::kNotFound) {
    events->push_back(Event("Normal", "MigInstanceDestroyed",
                            what + (s.ok() ? " destroyed " : " already gone ") + why,
                            last.tenant, last.job, c.instance.gpu));
    return OkStatus();
  }
  events->push_back(Event("Warning", "MigTeardownFailed", what + ": " + s.message(), last.tenant,
                          last.job, c.instance.gpu));
  return s;
}

void GpuIsolation::ReconcileLocked(json* events) {
  // No attempt survives an agent restart: every instance recorded here is unused now.
  std::vector<Created> kept;
  std::set<std::pair<int, unsigned>> ours;
  for (Created& c : created_) {
    if (nvml_ == nullptr) {
      spdlog::warn("agent: cannot reconcile MIG instance {} on GPU {} without NVML", c.instance.gi_id,
                   c.instance.gpu);
      kept.push_back(std::move(c));
      continue;
    }
    StatusOr<std::vector<MigInstance>> now = nvml_->List(c.instance.gpu);
    bool present = false;
    for (const MigInstance& m : now.ok() ? *now : std::vector<MigInstance>{}) {
      present |= m.gi_id == c.instance.gi_id && m.start == c.instance.start &&
                 m.profile_id == c.instance.profile_id;
    }
    if (!present) continue;  // gone (a GPU reset, or someone removed it)
    if (!DestroyLocked(c, events, "(left over by an earlier run of this agent)").ok()) {
      ours.insert({c.instance.gpu, c.instance.gi_id});
      kept.push_back(std::move(c));
    }
  }
  created_ = std::move(kept);
  if (Status s = SaveLocked(); !s.ok()) spdlog::error("agent: {}", s.ToString());
  foreign_ = json::array();
  if (nvml_ == nullptr) return;
  StatusOr<int> count = nvml_->DeviceCount();
  for (int gpu = 0; count.ok() && gpu < *count; ++gpu) {
    StatusOr<bool> mig = nvml_->MigEnabled(gpu);
    if (!mig.ok() || !*mig) continue;
    StatusOr<std::vector<MigInstance>> list = nvml_->List(gpu);
    if (!list.ok()) {
      spdlog::warn("agent: listing MIG instances of GPU {}: {}", gpu, list.status().ToString());
      continue;
    }
    for (const MigInstance& m : *list) {
      if (ours.count({gpu, m.gi_id})) continue;
      spdlog::warn("agent: GPU {}: MIG GPU instance {} (profile {}, slots {}..{}, {}) was not created "
                   "by this agent; left alone",
                   gpu, m.gi_id, m.profile_id, m.start, m.start + m.size - 1, m.uuid);
      foreign_.push_back({{"gpu", gpu}, {"gpuInstance", m.gi_id}, {"profile", m.profile_id},
                          {"start", m.start}, {"size", m.size}, {"uuid", m.uuid}});
    }
  }
}

StatusOr<std::map<std::string, std::string>> GpuIsolation::Prepare(const std::string& attempt,
                                                                    const std::string& tenant,
                                                                    const std::string& job,
                                                                    const json& gpus, json* events) {
  std::lock_guard<std::mutex> l(mu_);
  std::vector<size_t> made;  // indices into created_ this call added or joined
  std::vector<Created> fresh;
  auto fail = [&](int gpu, const Status& s) -> Status {
    for (Created& c : fresh) (void)DestroyLocked(c, events, "(setup of attempt " + attempt + " failed)");
    for (size_t i : made) {
      auto& h = created_[i].holders;
      h.erase(std::remove_if(h.begin(), h.end(), [&](const Holder& x) { return x.attempt == attempt; }), h.end());
    }
    if (Status w = SaveLocked(); !w.ok()) spdlog::error("agent: {}", w.ToString());
    events->push_back(Event("Warning", "GpuSetupFailed", s.message(), tenant, job, gpu));
    return s;
  };
  StatusOr<std::vector<Entry>> entries = ParseEntries(gpus);
  if (!entries.ok()) return fail(-1, InvalidArgumentError("attempt " + attempt + ": " + entries.status().message()));

  std::map<std::string, std::string> env;
  std::vector<std::string> visible;
  std::map<int, std::vector<std::string>> new_slices;  // tenants after this attempt starts
  for (const Entry& e : *entries) {
    GpuState& state = gpus_[e.index];
    std::vector<std::string>& slices = new_slices.emplace(e.index, state.slices).first->second;
    std::string device;  // what the wipe helper is pointed at
    std::string what = "GPU " + std::to_string(e.index);
    int first = 0, size = kSlices;
    if (!options_.simulated && nvml_ != nullptr && state.uuid.empty()) {
      if (StatusOr<std::string> u = nvml_->Uuid(e.index); u.ok()) state.uuid = *u;
    }
    if (e.mig_start >= 0) {
      std::string model;
      if (!options_.simulated) {
        if (nvml_ == nullptr) {
          return fail(e.index, FailedPreconditionError(what + ": MIG slice " + e.mig_profile +
                                                       " assigned but NVML is not available: " + nvml_error_));
        }
        StatusOr<std::string> name = nvml_->Name(e.index);
        if (!name.ok()) return fail(e.index, name.status());
        model = CatalogModelForNvmlName(*name);
        if (model.empty()) {
          return fail(e.index, FailedPreconditionError(what + " (" + *name + ") is not a catalog GPU with MIG"));
        }
      }
      StatusOr<std::pair<int, int>> slices_of = ProfileSlices(model, e.mig_profile, e.mig_start);
      if (!slices_of.ok()) return fail(e.index, InvalidArgumentError(what + ": " + slices_of.status().message()));
      first = e.mig_start;
      size = slices_of->second;
      what += " MIG " + e.mig_profile + "@" + std::to_string(e.mig_start);
      if (options_.simulated) {
        events->push_back(Event("Normal", "MigInstanceCreated",
                                what + ": created for attempt " + attempt + " (simulated node: recorded only)",
                                tenant, job, e.index));
        visible.push_back(std::to_string(e.index));
      } else {
        // An instance at this place that this agent made and another attempt still holds.
        size_t found = created_.size();
        for (size_t i = 0; i < created_.size(); ++i) {
          const MigInstance& m = created_[i].instance;
          if (m.gpu == e.index && m.start == e.mig_start && created_[i].profile_name == e.mig_profile) found = i;
        }
        MigInstance inst;
        if (found == created_.size()) {
          StatusOr<MigProfileIds> ids = MigProfileIdsFor(slices_of->first, slices_of->second);
          if (!ids.ok()) return fail(e.index, ids.status());
          StatusOr<MigInstance> m = nvml_->Create(e.index, *ids, e.mig_start);
          if (!m.ok()) return fail(e.index, Status(m.status().code(), what + ": " + m.status().message()));
          Created c{*m, e.mig_profile, {{attempt, tenant, job}}};
          created_.push_back(c);
          fresh.push_back(c);
          inst = *m;
          if (Status s = SaveLocked(); !s.ok()) return fail(e.index, s);  // recorded before use
          events->push_back(Event("Normal", "MigInstanceCreated",
                                  what + ": GPU instance " + std::to_string(m->gi_id) + " (NVML profile " +
                                      std::to_string(m->profile_id) + ") created for attempt " + attempt +
                                      " as " + m->uuid,
                                  tenant, job, e.index));
        } else {
          // Never two tenants on one slice: a holder of another tenant means the placement is
          // wrong (or stale); this attempt does not start there.
          for (const auto& h : created_[found].holders) {
            if (h.tenant != tenant) {
              return fail(e.index, FailedPreconditionError(what + ": the MIG instance there is in use by tenant " +
                                                           h.tenant + "; it is not shared across tenants"));
            }
          }
          created_[found].holders.push_back({attempt, tenant, job});
          made.push_back(found);
          inst = created_[found].instance;
        }
        device = inst.uuid;
        visible.push_back(inst.uuid);
      }
    } else {
      device = state.uuid.empty() ? std::to_string(e.index) : state.uuid;
      visible.push_back(std::to_string(e.index));
    }

    // The wipe: any slice last used by someone else (or unknown after a lost state file).
    std::set<std::string> others;
    for (int s = first; s < first + size && s < kSlices; ++s) {
      if (!slices[s].empty() && slices[s] != tenant) others.insert(slices[s]);
      if (slices[s].empty() && all_dirty_) others.insert("unknown (GPU state was lost)");
    }
    if (!others.empty()) {
      const std::string before = " before tenant " + tenant + " (last used by " + Join(others) + ")";
      if (options_.simulated) {
        events->push_back(Event("Normal", "GpuMemoryWiped",
                                what + ": wiped" + before + " (simulated node: recorded only)", tenant, job, e.index));
      } else {
        std::vector<std::string> cmd = options_.wipe_command;
        if (cmd.empty()) cmd = {"/proc/self/exe", "gpu-wipe"};
        StatusOr<WipeResult> w = RunWipeHelper(cmd, options_.cuda_library, device, options_.wipe_timeout);
        if (w.ok()) {
          events->push_back(Event("Normal", "GpuMemoryWiped",
                                  what + ": wiped " + GiB(w->bytes) + " in " +
                                      std::to_string(static_cast<int64_t>(w->ms + 0.5)) + " ms" + before +
                                      " [" + std::to_string(w->bytes) + " bytes]",
                                  tenant, job, e.index));
        } else if (w.status().code() == StatusCode::kUnavailable && options_.allow_unwiped_handover) {
          events->push_back(Event("Warning", "GpuNotWiped",
                                  what + ": handed over unwiped" + before + ": " + w.status().message() +
                                      " (allowed by --allow-unwiped-gpu-handover)",
                                  tenant, job, e.index));
        } else {
          return fail(e.index, Status(w.status().code(), what + ": memory wipe" + before +
                                                             " failed: " + w.status().message() +
                                                             "; not handed over"));
        }
      }
    }
    for (int s = first; s < first + size && s < kSlices; ++s) slices[s] = tenant;
  }
  // The new tenants are durable before the attempt can touch the GPUs.
  std::map<int, std::vector<std::string>> old;
  for (auto& [index, slices] : new_slices) {
    old[index] = gpus_[index].slices;
    gpus_[index].slices = slices;
  }
  if (Status s = SaveLocked(); !s.ok()) {
    for (auto& [index, slices] : old) gpus_[index].slices = slices;
    return fail(-1, s);
  }

  std::string devices, millis, mems, pinned;
  bool fractional = false, capped = false;
  int64_t min_milli = 1000;
  for (size_t i = 0; i < entries->size(); ++i) {
    const Entry& e = (*entries)[i];
    const std::string sep = i == 0 ? "" : ",";
    devices += sep + visible[i];
    millis += sep + std::to_string(e.milli);
    mems += sep + std::to_string(e.mem_mib);
    fractional |= e.milli < 1000;
    capped |= e.mem_mib > 0;
    min_milli = std::min(min_milli, e.milli);
    if (e.milli < 1000 && e.mem_mib > 0) {
      pinned += (pinned.empty() ? "" : ",") + std::to_string(i) + "=" + std::to_string(e.mem_mib) + "M";
    }
  }
  env["CUDA_VISIBLE_DEVICES"] = devices;
  if (!entries->empty()) env["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID";
  if (fractional) {
    env["AICLOUD_GPU_MILLI"] = millis;
    env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] = std::to_string(std::max<int64_t>(1, min_milli / 10));
    if (!pinned.empty()) env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] = pinned;
  }
  if (capped) env["AICLOUD_GPU_MEMORY_MIB"] = mems;
  return env;
}

void GpuIsolation::Release(const std::string& attempt, json* events) {
  std::lock_guard<std::mutex> l(mu_);
  bool changed = false;
  for (auto it = created_.begin(); it != created_.end();) {
    auto& h = it->holders;
    const auto held = std::find_if(h.begin(), h.end(), [&](const Holder& x) { return x.attempt == attempt; });
    if (held == h.end()) {
      ++it;
      continue;
    }
    changed = true;
    if (h.size() > 1) {
      h.erase(held);
      ++it;
      continue;
    }
    if (DestroyLocked(*it, events, "after attempt " + attempt + " ended").ok()) {
      it = created_.erase(it);
    } else {
      h.clear();  // kept on record: the next start reconciles it
      ++it;
    }
  }
  if (changed) {
    if (Status s = SaveLocked(); !s.ok()) spdlog::error("agent: {}", s.ToString());
  }
}

std::vector<std::string> GpuIsolation::Holders() const {
  std::lock_guard<std::mutex> l(mu_);
  std::vector<std::string> out;
  for (const Created& c : created_) {
    for (const Holder& h : c.holders) out.push_back(h.attempt);
  }
  return out;
}

json GpuIsolation::ForeignInstances() const {
  std::lock_guard<std::mutex> l(mu_);
  return foreign_;
}

std::vector<std::string> GpuDeviceDenials(const json& node_gpus, const json& assigned) {
  constexpr int kNvidiaMajor = 195;   // /dev/nvidia<N> is c 195:N (195:255 is /dev/nvidiactl)
  std::set<int64_t> mine;
  if (assigned.is_array()) {
    for (const json& g : assigned) {
      if (g.is_object() && g.contains("index") && g["index"].is_number_integer()) mine.insert(g["index"].get<int64_t>());
    }
  }
  std::vector<std::string> deny;
  if (!node_gpus.is_array()) return deny;
  for (const json& g : node_gpus) {
    if (!g.is_object() || !g.contains("index") || !g["index"].is_number_integer()) continue;
    const int64_t index = g["index"].get<int64_t>();
    if (index < 0 || index > 254 || mine.count(index)) continue;
    deny.push_back("c " + std::to_string(kNvidiaMajor) + ":" + std::to_string(index) + " rwm");
  }
  return deny;
}

}  // namespace aicloud::agent
