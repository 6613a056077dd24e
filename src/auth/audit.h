// AuditLog: a tamper-evident, hash-chained record of every API decision, kept in the store.
//
//   AuditLog audit(store, clock);               // continues the chain already in the store
//   Status s = audit.Append({.user = "bob", .key_id = "3f9a0c1b2d4e", .verb = "create",
//                            .resource = "jobs", .tenant = "nlp", .name = "train-1",
//                            .allowed = true, .reason = d.reason,
//                            .policy_revision = d.policy_revision, .request_id = rid,
//                            .http_status = 201});   // returns once durably committed
//   VerifyResult v = audit.Verify();             // v.ok, or v.problem names the first bad record
//
// Records are AuditRecord objects (cluster-scoped, name = 12-digit zero-padded seq, so store
// order is seq order) with spec {seq, time (RFC 3339, ms, UTC), user, keyId, verb, resource,
// tenant, name, decision: "allow"|"deny", reason, policyRevision, requestId, httpStatus,
// prevHash, hash}. hash = sha256hex(prevHash + spec-without-hash.dump()) (nlohmann's dump of an
// object: sorted keys, deterministic); record 1's prevHash is 64 zeros. An AuditHead object
// (cluster-scoped, name "head") holds {seq, hash} of the newest record and is written in the
// same commit as the records, with an optimistic-concurrency check, so two writers cannot fork
// the chain.
//
// Group commit: Append queues the entry; one writer thread takes everything queued, assigns
// consecutive seqs, chains the hashes and commits the batch plus the head in ONE store Commit,
// then wakes the callers. If the commit fails, the chain state is re-read from the store; on a
// conflict (another writer moved the chain) the batch is rebuilt on top of it and retried with
// random backoff for up to 5 s; on any other error its callers get the error.
//
// What Verify catches: an edited record (hash mismatch), an edited record whose hash was
// recomputed (the next record's prevHash), a deleted record (seq gap), deleted newest records
// (head count). What it cannot catch: someone with store write access rewriting the whole tail
// and the head consistently — anchor head hashes outside the store for that.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <thread>

#include "core/clock.h"
#include "core/status.h"
#include "store/store.h"

namespace aicloud::auth {

struct AuditEntry {
  std::string user, key_id, verb, resource, tenant, name;
  bool allowed = true;
  std::string reason;
  int64_t policy_revision = 0;
  std::string request_id;
  int http_status = 0;
};

struct VerifyResult {
  bool ok = false;
  int64_t records = 0;  // records checked
  // "record 17: hash mismatch (edited)", "record 12 missing (chain broken between 11 and 13)",
  // "head says 40 records, found 39"; "" when ok.
  std::string problem;
};

inline constexpr const char* kAuditRecordKind = "AuditRecord";
inline constexpr const char* kAuditHeadKind = "AuditHead";

// The AuditRecord object name for a seq: 12 digits, zero-padded.
std::string AuditRecordName(int64_t seq);

// Thread-safe.
class AuditLog {
 public:
  AuditLog(store::Store* store, Clock* clock);  // both outlive it
  ~AuditLog();                                  // commits what is queued, joins the writer
  AuditLog(const AuditLog&) = delete;
  AuditLog& operator=(const AuditLog&) = delete;

  // Appends one record; blocks until it is durably committed (or the commit failed).
  Status Append(AuditEntry entry);

  // Checks every record up to the head: seq contiguity, prevHash links, recomputed hashes and
  // the head's count and hash. Records appended after the head was read are not checked.
  VerifyResult Verify();

 private:
  struct Pending;
  void WriterLoop();
  Status CommitBatch(std::deque<Pending*>& batch);
  Status ReloadHead();
  std::string NowRfc3339Ms() const;

  store::Store* const store_;
  Clock* const clock_;
  const int64_t wall_anchor_micros_;  // system_clock at construction, us since the epoch
  const int64_t clock_anchor_;

  // Owned by the writer thread (and the constructor before it starts).
  bool head_loaded_ = false;
  int64_t head_seq_ = 0;
  std::string head_hash_;
  int64_t head_rv_ = 0;  // 0: no AuditHead object yet

  std::mutex mu_;
  std::condition_variable queued_;
  std::condition_variable done_;
  std::deque<Pending*> queue_;  // GUARDED_BY(mu_)
  bool stopping_ = false;       // GUARDED_BY(mu_)
  std::thread writer_;          // last: starts after everything it uses
};

}  // namespace aicloud::auth
