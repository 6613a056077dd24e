// LoraRegistry: the adapters one engine serves, by name. Hot load and unload from server
// threads, a fixed number of resident slots that a step can mix, least-recently-used eviction of
// adapters no running sequence holds, and the listing GET /v1/models shows (each adapter with
// the base model as `parent`).
//
//   StatusOr<std::unique_ptr<LoraRegistry>> reg = LoraRegistry::Create(
//       model.config(), {.base_model = "smollm2-135m", .max_loras = 8, .max_lora_rank = 16});
//   AICLOUD_RETURN_IF_ERROR((*reg)->Load("sql", "/adapters/sql"));  // POST /v1/load_lora_adapter
//   StatusOr<LoraPin> pin = (*reg)->Acquire("sql");                   // a request for model "sql"
//   request.adapter_id = pin->adapter_id();  // what the scheduler and the KV CacheScope carry
//   // each step the runner maps the tokens' adapter ids (0: base model) to the step's grouping:
//   AICLOUD_RETURN_IF_ERROR((*reg)->Resolve(batch.adapters, lora_batch));
//   // the pin is dropped when the request finishes; from then on the slot may be reused.
//
// States. A registered adapter is known by name and directory: listed, and requestable. A
// resident one also holds its weights in one of max_loras slots (vLLM's --max-loras); only
// resident adapters run, and a step may mix all of them. Load makes the new adapter resident,
// evicting the least recently used adapter that no sequence pins if every slot is taken (when
// every slot is pinned it stays registered only). An evicted adapter stays registered and is read
// again from its directory by its next Acquire. An adapter pinned by a running sequence is never
// evicted or unloaded.
//
// Adapter ids. Each residency gets a fresh positive id (0 is the base model, as in Request and
// CacheScope): the id names the weights in one slot, so KV blocks computed under one version of
// an adapter are never matched by a reloaded one (whose files may have changed), and a step can
// only name weights a pin holds. Slots stay inside the registry and LoraBatch.
//
// Thread safety: every method may be called from any thread. One mutex guards the tables; reading
// and validating adapter files runs outside it, so a slow disk stalls only the caller, never the
// engine thread, which takes the mutex briefly once per step (Resolve) and when it drops pins.
// Ownership: pins point at their registry, which must outlive them.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "engine/kernels/dtype.h"
#include "engine/lora/adapter.h"
#include "engine/lora/apply.h"
#include "engine/model/config.h"

namespace aicloud::engine {

// The adapter id of the bare base model.
inline constexpr int32_t kBaseAdapterId = 0;

struct LoraRegistryOptions {
  std::string base_model;      // the served model's id: `parent` of every adapter, not a valid adapter name
  int32_t max_loras = 1;       // resident adapters (slots)
  int64_t max_lora_rank = 16;  // larger adapters are refused at load
  DType dtype = DType::kF32;   // storage of A and B: kF32 or kF16
};

// One row of the listing.
struct LoraInfo {
  std::string name;
  std::string parent;  // the base model
  std::filesystem::path dir;
  int64_t rank = 0;
  double alpha = 0;
  float scale = 0;
  std::string base_model_name_or_path;  // as the adapter's config states it
  bool resident = false;
  int32_t slot = -1;        // when resident
  int32_t adapter_id = 0;   // when resident: the id of this residency
  int64_t pins = 0;         // sequences holding it
  size_t bytes = 0;         // weights held, when resident
};

class LoraRegistry;

// A sequence's hold on a resident adapter: its slot can be neither evicted nor unloaded while the
// pin lives. Move-only; the destructor releases the hold.
class LoraPin {
 public:
  LoraPin() = default;
  LoraPin(LoraPin&& other) noexcept;
  LoraPin& operator=(LoraPin&& other) noexcept;
  LoraPin(const LoraPin&) = delete;
  LoraPin& operator=(const LoraPin&) = delete;
  ~LoraPin();

  // The residency's id: Request::adapter_id, CacheScope::adapter_id and the per-token entries of
  // the runner's batch (Resolve) carry it.
  int32_t adapter_id() const { return adapter_id_; }
  // The slot holding the weights (LoraBatch::Reset's slot table index).
  int32_t slot() const { return slot_; }
  bool held() const { return registry_ != nullptr; }
  // Releases the hold now.
  void Reset();

 private:
  friend class LoraRegistry;
  LoraPin(LoraRegistry* registry, int32_t slot, int32_t adapter_id)
      : registry_(registry), slot_(slot), adapter_id_(adapter_id) {}
  LoraRegistry* registry_ = nullptr;
  int32_t slot_ = kNoLora;
  int32_t adapter_id_ = 0;
};

class LoraRegistry {
 public:
  // INVALID_ARGUMENT for max_loras < 1, a max_lora_rank outside [1, kMaxLoraRank], or a dtype
  // other than F32/F16.
  static StatusOr<std::unique_ptr<LoraRegistry>> Create(const ModelConfig& base, LoraRegistryOptions options);
  LoraRegistry(const LoraRegistry&) = delete;
  LoraRegistry& operator=(const LoraRegistry&) = delete;
  ~LoraRegistry();

  // Registers `dir` as adapter `name` and makes it resident if a slot is free or can be freed.
  // Reads the files on the calling thread. INVALID_ARGUMENT for an empty name or the base
  // model's; ALREADY_EXISTS for a registered name; the adapter's error (NOT_FOUND,
  // INVALID_ARGUMENT, UNIMPLEMENTED, ...) prefixed with its name otherwise.
  Status Load(const std::string& name, const std::filesystem::path& dir);

  // Forgets `name` and frees its slot. NOT_FOUND when unknown; FAILED_PRECONDITION while a
  // sequence pins it.
  Status Unload(std::string_view name);

  // Pins `name` for a sequence, reading it back from its directory first when it was evicted (on
  // the calling thread: call it where a request is admitted, not in the step loop).
  // NOT_FOUND when unknown; RESOURCE_EXHAUSTED when it is not resident and every slot is pinned
  // (retry once a sequence finishes); the adapter's error when its files went bad.
  StatusOr<LoraPin> Acquire(std::string_view name);

  // The step's grouping: token i runs adapter token_adapter_ids[i] (kBaseAdapterId: the base
  // model); `out` gets the tokens grouped by adapter (see LoraBatch::Reset). FAILED_PRECONDITION
  // (and an empty `out`) for an id that is not a pinned residency: unknown, evicted, or no longer
  // held by any request (its slot could be reused at any moment).
  Status Resolve(std::span<const int32_t> token_adapter_ids, LoraBatch& out) const;

  // Every registered adapter, by name.
  std::vector<LoraInfo> List() const;
  bool Contains(std::string_view name) const;

  const ModelConfig& base_config() const { return base_; }
  const LoraRegistryOptions& options() const { return options_; }

 private:
  friend class LoraPin;
  struct Entry {
    std::filesystem::path dir;
    LoraConfig config;
    uint64_t registration = 0;  // distinguishes a re-registered name
    int32_t slot = kNoLora;     // kNoLora: not resident
    int32_t adapter_id = 0;
    int64_t pins = 0;
    uint64_t last_used = 0;
    size_t bytes = 0;
  };

  LoraRegistry(const ModelConfig& base, LoraRegistryOptions options);
  // Puts `adapter` into a free slot, or the slot of the least recently used unpinned adapter.
  // False when every slot is pinned. REQUIRES: mu_ held; `e` not resident.
  bool InstallLocked(Entry& e, std::shared_ptr<const LoraAdapter> adapter);
  void Release(int32_t slot);

  const ModelConfig base_;
  const LoraRegistryOptions options_;

  mutable std::mutex mu_;
  std::map<std::string, Entry, std::less<>> entries_;              // GUARDED_BY(mu_)
  std::vector<std::shared_ptr<const LoraAdapter>> slots_;          // GUARDED_BY(mu_)
  std::vector<Entry*> slot_owner_;                                 // GUARDED_BY(mu_)
  uint64_t tick_ = 0;                                              // GUARDED_BY(mu_)
  uint64_t registrations_ = 0;                                     // GUARDED_BY(mu_)
  int32_t next_adapter_id_ = 1;                                    // GUARDED_BY(mu_)
  mutable std::vector<int32_t> token_slots_;                       // GUARDED_BY(mu_), Resolve's scratch
};

}  // namespace aicloud::engine
