#include "store/memory_store.h"

#include <algorithm>
#include <optional>

#include "store/object.h"

namespace aicloud::store {

// Writes go to an overlay until the whole transaction succeeds, so a failing op leaves the
// store untouched (all-or-nothing without an undo log).
class MemoryStore::View final : public internal::TxnView {
 public:
  explicit View(const std::map<ObjectKey, json>& base) : base_(base) {}

  StatusOr<std::optional<json>> Read(const ObjectKey& key) override {
    if (auto it = overlay_.find(key); it != overlay_.end()) return it->second;
    if (auto it = base_.find(key); it != base_.end()) return std::optional<json>(it->second);
    return std::optional<json>();
  }
  Status Write(const ObjectKey& key, EventType type, const json& object,
               int64_t revision) override {
    overlay_[key] = type == EventType::kDeleted ? std::nullopt : std::optional<json>(object);
    events_.push_back({type, revision, object});
    return OkStatus();
  }

  const std::map<ObjectKey, std::optional<json>>& overlay() const { return overlay_; }
  std::vector<WatchEvent>& events() { return events_; }

 private:
  const std::map<ObjectKey, json>& base_;
  std::map<ObjectKey, std::optional<json>> overlay_;
  std::vector<WatchEvent> events_;
};

MemoryStore::MemoryStore(MemoryStoreOptions options) : options_(options) {}

StatusOr<json> MemoryStore::Get(const ObjectKey& key) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = objects_.find(key);
  if (it == objects_.end()) return NotFoundError(key.ToString() + " not found");
  return it->second;
}

StatusOr<std::vector<json>> MemoryStore::Commit(std::vector<WriteOp> ops) {
  std::lock_guard<std::mutex> lock(mu_);
  View view(objects_);
  int64_t rv = revision_;
  StatusOr<std::vector<json>> out = internal::ApplyOps(ops, &rv, view);
  if (!out.ok()) return out;
  for (const auto& [key, doc] : view.overlay()) {
    if (doc) {
      objects_[key] = *doc;
    } else {
      objects_.erase(key);
    }
  }
  for (WatchEvent& e : view.events()) changes_.push_back(std::move(e));
  while (static_cast<int64_t>(changes_.size()) >
         std::max<int64_t>(1, options_.change_log_capacity)) {
    changes_.pop_front();
  }
  revision_ = rv;
  revision_advanced_.notify_all();
  return out;
}

StatusOr<ListResult> MemoryStore::List(const ListOptions& options) {
  StatusOr<LabelSelector> selector = internal::CheckListOptions(options);
  if (!selector.ok()) return selector.status();
  StatusOr<std::optional<internal::ContinueToken>> token = internal::DecodeContinueToken(options);
  if (!token.ok()) return token.status();

  std::lock_guard<std::mutex> lock(mu_);
  internal::PageBuilder page(options, std::move(*selector));
  auto it = objects_.lower_bound(ObjectKey{options.kind, options.tenant.value_or(""), ""});
  if (*token) {
    it =
        objects_.upper_bound(ObjectKey{options.kind, (*token)->after_tenant, (*token)->after_name});
  }
  for (; it != objects_.end() && it->first.kind == options.kind; ++it) {
    if (options.tenant && it->first.tenant != *options.tenant) break;
    if (!page.Offer(it->second)) break;
  }
  return page.Finish(revision_);
}

StatusOr<ChangesResult> MemoryStore::Changes(const std::string& kind, int64_t after, int max) {
  if (max <= 0) return InvalidArgumentError("changes: max must be > 0");
  if (after < 0) return InvalidArgumentError("changes: resource version must be >= 0");
  std::lock_guard<std::mutex> lock(mu_);
  ChangesResult out;
  out.resource_version = std::max(after, revision_);
  if (changes_.empty() || after >= revision_) return out;
  int64_t oldest = changes_.front().resource_version;
  if (after < oldest - 1) return internal::TooOldError(after, oldest);
  // Revisions in the log are consecutive, so the first one after `after` is found by index.
  for (size_t i = static_cast<size_t>(std::max<int64_t>(0, after + 1 - oldest));
       i < changes_.size(); ++i) {
    const WatchEvent& e = changes_[i];
    if (!kind.empty() && e.object.value("kind", "") != kind) continue;
    out.events.push_back(e);
    if (static_cast<int>(out.events.size()) == max) {
      out.resource_version = e.resource_version;  // resume right after the last one returned
      break;
    }
  }
  return out;
}

int64_t MemoryStore::Revision() {
  std::lock_guard<std::mutex> lock(mu_);
  return revision_;
}

int64_t MemoryStore::WaitForRevision(int64_t after, std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  revision_advanced_.wait_for(lock, timeout, [&] { return revision_ > after; });
  return revision_;
}

}  // namespace aicloud::store
