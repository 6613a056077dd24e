// Test helpers for the store room: temp dirs, manifests, and a factory per backend so one
// typed suite (store_test.cc) runs against every Store implementation.
#pragma once

#include <stdlib.h>

#include <filesystem>
#include <chrono>
#include <memory>
#include <string>

#include "store/memory_store.h"
#include "store/sqlite/sqlite_store.h"
#include "store/store.h"

namespace aicloud::store::testing {

// A Store that hands every call to another: tests derive from it and override the one call they
// want to delay, fail or interleave with other work.
class ForwardingStore : public Store {
 public:
  explicit ForwardingStore(Store* inner) : inner_(inner) {}
  StatusOr<json> Get(const ObjectKey& key) override { return inner_->Get(key); }
  StatusOr<std::vector<json>> Commit(std::vector<WriteOp> ops) override { return inner_->Commit(std::move(ops)); }
  StatusOr<ListResult> List(const ListOptions& o) override { return inner_->List(o); }
  StatusOr<ChangesResult> Changes(const std::string& kind, int64_t after, int max) override {
    return inner_->Changes(kind, after, max);
  }
  int64_t Revision() override { return inner_->Revision(); }
  int64_t WaitForRevision(int64_t after, std::chrono::milliseconds timeout) override {
    return inner_->WaitForRevision(after, timeout);
  }

 protected:
  Store* inner() { return inner_; }

 private:
  Store* inner_;
};

// A fresh directory under the system temp dir, removed with everything in it on destruction.
class TempDir {
 public:
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "aicloud-store-XXXXXX").string();
    path_ = mkdtemp(tmpl.data());
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  std::string File(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

inline json Manifest(const std::string& kind, const std::string& tenant, const std::string& name,
                     json labels = json::object(), json spec = json::object()) {
  json m = {{"apiVersion", "aicloud/v1"},
            {"kind", kind},
            {"metadata", {{"name", name}, {"labels", std::move(labels)}}},
            {"spec", std::move(spec)}};
  if (!tenant.empty()) m["metadata"]["tenant"] = tenant;
  return m;
}

struct MemoryBackend {
  static constexpr const char* kName = "memory";
  std::unique_ptr<Store> Make(int64_t change_log_capacity = 10'000) {
    return std::make_unique<MemoryStore>(MemoryStoreOptions{change_log_capacity});
  }
};

struct SqliteBackend {
  static constexpr const char* kName = "sqlite";
  std::unique_ptr<Store> Make(int64_t change_log_capacity = 10'000) {
    auto store = sqlite::SqliteStore::Open(
        {.path = dir.File("state.db"), .change_log_capacity = change_log_capacity});
    if (!store.ok()) return nullptr;
    return std::move(*store);
  }
  TempDir dir;
};

}  // namespace aicloud::store::testing
