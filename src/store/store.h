// Store: the durable state of the aicloud server. Every API resource (Tenant, Job, Node, ...) is
// a Kubernetes-shaped JSON document kept here; controllers and the API read and write only
// through this interface, so a PostgreSQL backend can replace the embedded SQLite one without
// changing callers (see docs/store.md).
//
//   std::unique_ptr<Store> store = ...;  // SqliteStore::Open(...) or MemoryStore
//   StatusOr<json> job = store->Create(R"({"apiVersion": "aicloud/v1", "kind": "Job",
//       "metadata": {"name": "train-1", "tenant": "nlp", "labels": {"team": "nlp"}},
//       "spec": {"workers": 2}})"_json);
//   int64_t rv = ResourceVersionOf(*job);
//   (*job)["spec"]["workers"] = 4;
//   StatusOr<json> updated = store->Update(*job, rv);  // ABORTED if someone wrote in between
//
//   ListOptions opts{.kind = "Job", .tenant = "nlp", .label_selector = "team=nlp", .limit = 100};
//   StatusOr<ListResult> page = store->List(opts);  // page->continue_token for the next page
//
//   // Watch: poll the change log from the list's revision (an SSE endpoint streams these).
//   StatusOr<std::vector<WatchEvent>> events = store->Changes("Job", page->resource_version, 500);
//
// The model:
// - An object is keyed by (kind, tenant, name); tenant is "" for cluster-scoped kinds (Node,
//   Tenant, ...). The key comes from `kind`, `metadata.tenant` and `metadata.name`.
// - The store keeps one revision counter for the whole store (as etcd does). Every successful
//   write (each op of a transaction) takes the next revision; it becomes the object's
//   `metadata.resourceVersion` (a decimal string, as Kubernetes sends it) and the revision of its
//   change event. So resourceVersions increase across all objects in commit order.
// - The store sets `metadata.uid` (a random UUID) and `metadata.createdAt` (RFC 3339 UTC) on
//   create and keeps them on update, whatever the caller sends.
// - Writes are linearizable: a write that returned OK is visible to every later read, and on a
//   durable backend it survives a crash (SQLite: committed with synchronous=FULL).
#pragma once

#include <chrono>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"

namespace aicloud::store {

using nlohmann::json;

struct ObjectKey {
  std::string kind;
  std::string tenant;  // "" for cluster-scoped kinds
  std::string name;

  auto operator<=>(const ObjectKey&) const = default;
  // "Job nlp/train-1", or "Node gpu-7" when cluster-scoped; used in every error message.
  std::string ToString() const;
};

// One write in a transaction. Build with the factories.
struct WriteOp {
  enum class Type { kCreate, kUpdate, kDelete };
  Type type = Type::kCreate;
  json object;                            // kCreate, kUpdate: the full new document
  ObjectKey key;                          // kDelete
  int64_t expected_resource_version = 0;  // kUpdate, kDelete: 0 means unconditional

  static WriteOp Create(json object) { return {Type::kCreate, std::move(object), {}, 0}; }
  static WriteOp Update(json object, int64_t expected_rv) {
    return {Type::kUpdate, std::move(object), {}, expected_rv};
  }
  static WriteOp Delete(ObjectKey key, int64_t expected_rv) {
    return {Type::kDelete, nullptr, std::move(key), expected_rv};
  }
};

struct ListOptions {
  std::string kind;
  std::optional<std::string> tenant;  // nullopt: every tenant (and cluster-scoped objects)
  std::string label_selector;         // LabelSelector syntax; "" matches everything
  int64_t limit = 0;                  // at most this many items; 0 means no limit
  std::string continue_token;         // from the previous page; "" for the first
};

struct ListResult {
  std::vector<json> items;       // ordered by (tenant, name)
  std::string continue_token;    // "" when this was the last page
  int64_t resource_version = 0;  // the store revision the page was read at
};

enum class EventType { kAdded, kModified, kDeleted };
// "ADDED", "MODIFIED", "DELETED": the Kubernetes watch event names.
const char* EventTypeName(EventType type);

struct WatchEvent {
  EventType type = EventType::kAdded;
  int64_t resource_version = 0;  // the revision of this change
  json object;                   // the object after the change (before it, for kDeleted)
};

struct ChangesResult {
  std::vector<WatchEvent> events;
  // The revision this answer is complete through (a Kubernetes "bookmark"): pass it as the
  // next call's `after`. It advances past other kinds' changes even when `events` is empty, so
  // a watcher of a quiet kind does not fall behind the bounded log.
  int64_t resource_version = 0;
};

// Thread-safe: every method may be called concurrently from any thread. Implementations
// serialize writes internally (in commit order); reads never see a partial transaction.
class Store {
 public:
  virtual ~Store() = default;

  // Stores a new object and returns it as stored (uid, createdAt, resourceVersion set).
  // ALREADY_EXISTS if the key is taken; INVALID_ARGUMENT naming the field if the document is
  // malformed (no kind, bad name or tenant, labels not a map of valid strings).
  StatusOr<json> Create(json object);

  // NOT_FOUND when absent.
  virtual StatusOr<json> Get(const ObjectKey& key) = 0;

  // Replaces the object (spec, status, labels, ...; uid and createdAt are kept). With
  // expected_resource_version != 0 the write happens only if the object is still at that
  // version; otherwise ABORTED "Job nlp/a: resourceVersion conflict: expected 5, current 7" and
  // the caller re-reads and retries. NOT_FOUND if absent.
  StatusOr<json> Update(json object, int64_t expected_resource_version);

  // Removes the object and returns its last state. Same preconditions as Update.
  StatusOr<json> Delete(const ObjectKey& key, int64_t expected_resource_version);

  // Applies every op or none, in order, as one atomic commit (later ops see earlier ones).
  // Returns one document per op (the stored object; the last state for deletes). On failure the
  // error is the first failing op's, prefixed "op 2 of 3: " when there is more than one op.
  virtual StatusOr<std::vector<json>> Commit(std::vector<WriteOp> ops) = 0;

  // One page of the objects of a kind, in (tenant, name) order. Paging by continue token is
  // stable under concurrent writes: an object that exists for the whole listing appears exactly
  // once; one created or deleted meanwhile may or may not appear. (Unlike Kubernetes, later
  // pages are read at the current revision, not the first page's snapshot; each page reports
  // its own resource_version.) INVALID_ARGUMENT for a bad selector, a negative limit, or a
  // token that is malformed or from another kind or tenant.
  virtual StatusOr<ListResult> List(const ListOptions& options) = 0;

  // The changes to objects of `kind` ("" for every kind) with revision > after, oldest first, at
  // most `max` (> 0) of them. Watch from a List's resource_version to miss nothing, then from
  // each answer's resource_version. The log is bounded: when changes after `after` were already
  // discarded, OUT_OF_RANGE ("410 Gone", as Kubernetes says "too old resource version"): the
  // watcher must re-list and watch from the new list's resource_version.
  virtual StatusOr<ChangesResult> Changes(const std::string& kind, int64_t after, int max) = 0;

  // The store's current revision (the resourceVersion of the newest write).
  virtual int64_t Revision() = 0;

  // Blocks until Revision() > after or the timeout passes, and returns Revision(). Lets a watch
  // endpoint long-poll instead of spinning.
  virtual int64_t WaitForRevision(int64_t after, std::chrono::milliseconds timeout) = 0;
};

// metadata.resourceVersion as a number; 0 if absent or not a decimal string.
int64_t ResourceVersionOf(const json& object);

}  // namespace aicloud::store
