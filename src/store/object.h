// Internal to the store room: the rules every backend applies the same way, so MemoryStore and
// SqliteStore answer identically — object validation, metadata stamping, the optimistic
// concurrency checks and their messages, transaction application over a backend's view, and
// the continue-token format.
//
//   int64_t rv = revision_;
//   StatusOr<std::vector<json>> out = ApplyOps(ops, &rv, view);  // view: the backend's
//   reads/writes if (!out.ok()) { RollBack(); } else { revision_ = rv; }
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "store/label_selector.h"
#include "store/store.h"

namespace aicloud::store::internal {

// Checks kind, metadata.name, metadata.tenant and metadata.labels; returns the object's key.
StatusOr<ObjectKey> ValidateObject(const json& object);

// A backend's view of the store inside one transaction: reads see the transaction's own
// earlier writes. Not thread-safe; used by one committing thread.
class TxnView {
 public:
  virtual ~TxnView() = default;
  // The stored document, or nullopt when absent.
  virtual StatusOr<std::optional<json>> Read(const ObjectKey& key) = 0;
  // Records the change: for kAdded/kModified `object` is the new document to store, for
  // kDeleted the last state (the row is removed). Also appends the change-log event.
  virtual Status Write(const ObjectKey& key, EventType type, const json& object,
                       int64_t revision) = 0;
};

// Applies `ops` in order through `view`, taking revisions *revision + 1, + 2, ...; on success
// *revision is the last one used. On failure the view holds partial writes that the caller
// must roll back, and *revision is unspecified (the caller restores it).
StatusOr<std::vector<json>> ApplyOps(const std::vector<WriteOp>& ops, int64_t* revision,
                                     TxnView& view);

// Where a page resumes: strictly after (tenant, name), for the same kind/tenant/selector.
struct ContinueToken {
  std::string kind;
  std::optional<std::string> tenant;
  std::string selector;
  std::string after_tenant;
  std::string after_name;
};
std::string EncodeContinueToken(const ContinueToken& token);
// INVALID_ARGUMENT when malformed or issued for another kind, tenant or selector.
StatusOr<std::optional<ContinueToken>> DecodeContinueToken(const ListOptions& options);

// Collects one page: feed candidates in key order until Offer returns false.
class PageBuilder {
 public:
  PageBuilder(const ListOptions& options, LabelSelector selector)
      : options_(options), selector_(std::move(selector)) {}
  // Returns false once the page (plus one look-ahead item) is full.
  bool Offer(json object);
  ListResult Finish(int64_t resource_version);

 private:
  const ListOptions& options_;
  LabelSelector selector_;
  std::vector<json> items_;
};

// Validates the options and parses the selector (INVALID_ARGUMENT on a bad one).
StatusOr<LabelSelector> CheckListOptions(const ListOptions& options);

// The OUT_OF_RANGE answer for a watcher behind the retained log.
Status TooOldError(int64_t after, int64_t oldest_retained);

}  // namespace aicloud::store::internal
