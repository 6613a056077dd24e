#include "engine/lora/registry.h"

#include <utility>

namespace aicloud::engine {

// --- LoraPin ----------------------------------------------------------------------------------

LoraPin::LoraPin(LoraPin&& other) noexcept
    : registry_(std::exchange(other.registry_, nullptr)),
      slot_(std::exchange(other.slot_, kNoLora)),
      adapter_id_(std::exchange(other.adapter_id_, 0)) {}

LoraPin& LoraPin::operator=(LoraPin&& other) noexcept {
  if (this != &other) {
    Reset();
    registry_ = std::exchange(other.registry_, nullptr);
    slot_ = std::exchange(other.slot_, kNoLora);
    adapter_id_ = std::exchange(other.adapter_id_, 0);
  }
  return *this;
}

LoraPin::~LoraPin() { Reset(); }

void LoraPin::Reset() {
  if (registry_ != nullptr) registry_->Release(slot_);
  registry_ = nullptr;
  slot_ = kNoLora;
  adapter_id_ = 0;
}

// --- LoraRegistry -----------------------------------------------------------------------------

StatusOr<std::unique_ptr<LoraRegistry>> LoraRegistry::Create(const ModelConfig& base, LoraRegistryOptions options) {
  if (options.max_loras < 1) {
    return InvalidArgumentError("max_loras must be at least 1, got " + std::to_string(options.max_loras));
  }
  if (options.max_lora_rank < 1 || options.max_lora_rank > kMaxLoraRank) {
    return InvalidArgumentError("max_lora_rank must be in [1, " + std::to_string(kMaxLoraRank) + "], got " +
                                std::to_string(options.max_lora_rank));
  }
  if (options.dtype != DType::kF32 && options.dtype != DType::kF16) {
    return InvalidArgumentError("LoRA weights are stored as F32 or F16, not " + std::string(DTypeName(options.dtype)));
  }
  return std::unique_ptr<LoraRegistry>(new LoraRegistry(base, std::move(options)));
}

LoraRegistry::LoraRegistry(const ModelConfig& base, LoraRegistryOptions options)
    : base_(base),
      options_(std::move(options)),
      slots_(static_cast<size_t>(options_.max_loras)),
      slot_owner_(static_cast<size_t>(options_.max_loras), nullptr) {}

LoraRegistry::~LoraRegistry() = default;

bool LoraRegistry::InstallLocked(Entry& e, std::shared_ptr<const LoraAdapter> adapter) {
  int32_t slot = kNoLora;
  for (size_t s = 0; s < slots_.size(); ++s) {
    if (slot_owner_[s] == nullptr) {
      slot = static_cast<int32_t>(s);
      break;
    }
  }
  if (slot == kNoLora) {
    // Evict the least recently used resident adapter no sequence pins.
    Entry* victim = nullptr;
    for (Entry* owner : slot_owner_) {
      if (owner->pins == 0 && (victim == nullptr || owner->last_used < victim->last_used)) victim = owner;
    }
    if (victim == nullptr) return false;
    slot = victim->slot;
    victim->slot = kNoLora;
    victim->adapter_id = 0;
    victim->bytes = 0;
  }
  e.bytes = adapter->bytes();
  slots_[static_cast<size_t>(slot)] = std::move(adapter);
  slot_owner_[static_cast<size_t>(slot)] = &e;
  e.slot = slot;
  e.adapter_id = next_adapter_id_++;
  e.last_used = ++tick_;
  return true;
}

Status LoraRegistry::Load(const std::string& name, const std::filesystem::path& dir) {
  if (name.empty()) return InvalidArgumentError("LoRA adapter name is empty");
  if (name == options_.base_model) {
    return InvalidArgumentError("LoRA adapter name '" + name + "' is the base model's name");
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (entries_.contains(name)) return AlreadyExistsError("LoRA adapter '" + name + "' is already loaded");
  }
  // Read and validate without the lock.
  StatusOr<std::unique_ptr<LoraAdapter>> adapter =
      LoraAdapter::Load(dir, base_, {.max_rank = options_.max_lora_rank, .dtype = options_.dtype});
  if (!adapter.ok()) {
    return Status(adapter.status().code(), "LoRA adapter '" + name + "': " + adapter.status().message());
  }
  std::lock_guard<std::mutex> lock(mu_);
  auto [it, inserted] = entries_.try_emplace(name);
  if (!inserted) return AlreadyExistsError("LoRA adapter '" + name + "' is already loaded");
  Entry& e = it->second;
  e.dir = dir;
  e.config = (*adapter)->config();
  e.registration = ++registrations_;
  e.last_used = ++tick_;
  // When every slot is pinned the adapter stays registered only; Acquire reads it again.
  InstallLocked(e, std::shared_ptr<const LoraAdapter>(std::move(*adapter)));
  return OkStatus();
}

Status LoraRegistry::Unload(std::string_view name) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = entries_.find(name);
  if (it == entries_.end()) return NotFoundError("LoRA adapter '" + std::string(name) + "' is not loaded");
  Entry& e = it->second;
  if (e.pins > 0) {
    return FailedPreconditionError("LoRA adapter '" + std::string(name) + "' is in use by " + std::to_string(e.pins) +
                                   " running sequence(s)");
  }
  if (e.slot != kNoLora) {
    slots_[static_cast<size_t>(e.slot)].reset();
    slot_owner_[static_cast<size_t>(e.slot)] = nullptr;
  }
  entries_.erase(it);
  return OkStatus();
}

StatusOr<LoraPin> LoraRegistry::Acquire(std::string_view name) {
  std::filesystem::path dir;
  uint64_t registration = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = entries_.find(name);
    if (it == entries_.end()) return NotFoundError("LoRA adapter '" + std::string(name) + "' is not loaded");
    Entry& e = it->second;
    if (e.slot != kNoLora) {
      ++e.pins;
      e.last_used = ++tick_;
      return LoraPin(this, e.slot, e.adapter_id);
    }
    dir = e.dir;
    registration = e.registration;
  }
  // Evicted: read it back without the lock.
  StatusOr<std::unique_ptr<LoraAdapter>> adapter =
      LoraAdapter::Load(dir, base_, {.max_rank = options_.max_lora_rank, .dtype = options_.dtype});
  if (!adapter.ok()) {
    return Status(adapter.status().code(), "LoRA adapter '" + std::string(name) + "': " + adapter.status().message());
  }
  std::lock_guard<std::mutex> lock(mu_);
  auto it = entries_.find(name);
  if (it == entries_.end() || it->second.registration != registration) {
    return AbortedError("LoRA adapter '" + std::string(name) + "' was unloaded or replaced while it was read");
  }
  Entry& e = it->second;
  if (e.slot == kNoLora && !InstallLocked(e, std::shared_ptr<const LoraAdapter>(std::move(*adapter)))) {
    return ResourceExhaustedError("LoRA adapter '" + std::string(name) + "': all " + std::to_string(options_.max_loras) +
                                  " adapter slots are in use by running sequences");
  }
  ++e.pins;  // resident now (perhaps loaded by a concurrent Acquire meanwhile)
  e.last_used = ++tick_;
  return LoraPin(this, e.slot, e.adapter_id);
}

void LoraRegistry::Release(int32_t slot) {
  std::lock_guard<std::mutex> lock(mu_);
  Entry* e = slot_owner_[static_cast<size_t>(slot)];
  if (e == nullptr || e->pins <= 0) return;  // cannot happen: a pinned slot keeps its owner
  --e->pins;
  e->last_used = ++tick_;
}

Status LoraRegistry::Resolve(std::span<const int32_t> token_adapter_ids, LoraBatch& out) const {
  std::lock_guard<std::mutex> lock(mu_);
  token_slots_.resize(token_adapter_ids.size());
  int32_t last_id = kBaseAdapterId, last_slot = kNoLora;
  for (size_t i = 0; i < token_adapter_ids.size(); ++i) {
    const int32_t id = token_adapter_ids[i];
    if (id == kBaseAdapterId) {
      token_slots_[i] = kNoLora;
      continue;
    }
    if (id != last_id || last_slot == kNoLora) {
      last_id = id;
      last_slot = kNoLora;
      for (size_t s = 0; s < slot_owner_.size(); ++s) {
        const Entry* e = slot_owner_[s];
        if (e != nullptr && e->adapter_id == id && e->pins > 0) last_slot = static_cast<int32_t>(s);
      }
      if (last_slot == kNoLora) {
        out.Clear();
        return FailedPreconditionError("LoRA batch: token " + std::to_string(i) + " names adapter id " +
                                       std::to_string(id) + ", which no request holds resident");
      }
    }
    token_slots_[i] = last_slot;
  }
  return out.Reset(token_slots_, slots_);
}

std::vector<LoraInfo> LoraRegistry::List() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<LoraInfo> out;
  for (const auto& [name, e] : entries_) {
    LoraInfo i;
    i.name = name;
    i.parent = options_.base_model;
    i.dir = e.dir;
    i.rank = e.config.rank;
    i.alpha = e.config.alpha;
    i.scale = e.config.Scale();
    i.base_model_name_or_path = e.config.base_model_name_or_path;
    i.resident = e.slot != kNoLora;
    i.slot = e.slot;
    i.adapter_id = e.adapter_id;
    i.pins = e.pins;
    i.bytes = e.bytes;
    out.push_back(std::move(i));
  }
  return out;
}

bool LoraRegistry::Contains(std::string_view name) const {
  std::lock_guard<std::mutex> lock(mu_);
  return entries_.find(name) != entries_.end();
}

}  // namespace aicloud::engine
