// AuditLog: hash-chained audit records with a group-committing writer thread (see audit.h).
#include "core/thread_name.h"
#include "auth/audit.h"

#include <cstdio>
#include <exception>
#include <optional>
#include <random>

#include "auth/auth.h"
#include "auth/util.h"

namespace aicloud::auth {

using json = nlohmann::json;

namespace {

constexpr const char* kHeadName = "head";
constexpr size_t kMaxBatch = 1000;
// How long a batch keeps retrying when another writer moved the chain under it.
constexpr auto kConflictRetryFor = std::chrono::seconds(5);
const std::string kGenesisHash(64, '0');

std::string Canonical(const json& j) {
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

// hash = sha256hex(prevHash + canonical spec without `hash`).
std::string RecordHash(const json& spec) {
  json copy = spec;
  copy.erase("hash");
  std::string prev = copy.contains("prevHash") && copy["prevHash"].is_string()
                         ? copy["prevHash"].get<std::string>()
                         : "";
  return Sha256Hex(prev + Canonical(copy));
}

std::optional<int64_t> SeqFromName(const std::string& name) {
  if (name.size() != 12) return std::nullopt;
  int64_t v = 0;
  for (char c : name) {
    if (c < '0' || c > '9') return std::nullopt;
    v = v * 10 + (c - '0');
  }
  return v;
}

std::optional<int64_t> IntField(const json& obj, const char* field) {
  if (!obj.is_object()) return std::nullopt;
  auto it = obj.find(field);
  if (it == obj.end() || !it->is_number_integer()) return std::nullopt;
  return it->get<int64_t>();
}

std::string StrField(const json& obj, const char* field) {
  if (!obj.is_object()) return "";
  auto it = obj.find(field);
  return it != obj.end() && it->is_string() ? it->get<std::string>() : "";
}

}  // namespace

std::string AuditRecordName(int64_t seq) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%012lld", static_cast<long long>(seq));
  return buf;
}

struct AuditLog::Pending {
  AuditEntry entry;
  Status result;
  bool done = false;  // GUARDED_BY(mu_)
};

AuditLog::AuditLog(store::Store* store, Clock* clock)
    : store_(store),
      clock_(clock),
      wall_anchor_micros_(std::chrono::duration_cast<std::chrono::microseconds>(
                              std::chrono::system_clock::now().time_since_epoch())
                              .count()),
      clock_anchor_(clock->NowMicros()) {
  (void)ReloadHead();  // on failure the writer retries before its first commit
  writer_ = std::thread([this] {
    SetThreadName("audit-writer");
    WriterLoop();
  });
}

AuditLog::~AuditLog() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  queued_.notify_all();
  writer_.join();
}

std::string AuditLog::NowRfc3339Ms() const {
  int64_t micros = wall_anchor_micros_ + (clock_->NowMicros() - clock_anchor_);
  return internal::FormatRfc3339(
      std::chrono::system_clock::time_point(
          std::chrono::duration_cast<std::chrono::system_clock::duration>(
              std::chrono::microseconds(micros))),
      true);
}

Status AuditLog::ReloadHead() {
  head_loaded_ = false;
  StatusOr<json> head = store_->Get({kAuditHeadKind, "", kHeadName});
  if (head.ok()) {
    const json& spec = (*head)["spec"];
    std::optional<int64_t> seq = IntField(spec, "seq");
    if (!seq) return InternalError("AuditHead head: spec.seq missing");
    head_seq_ = *seq;
    head_hash_ = StrField(spec, "hash");
    head_rv_ = store::ResourceVersionOf(*head);
    head_loaded_ = true;
    return OkStatus();
  }
  if (head.status().code() != StatusCode::kNotFound) return head.status();
  // No head yet (or it was removed): continue from the newest record, if any.
  head_seq_ = 0;
  head_hash_ = kGenesisHash;
  head_rv_ = 0;
  store::ListOptions opts{.kind = kAuditRecordKind, .tenant = "", .limit = 1000};
  do {
    StatusOr<store::ListResult> page = store_->List(opts);
    if (!page.ok()) return page.status();
    if (!page->items.empty()) {
      const json& spec = page->items.back()["spec"];
      head_seq_ = IntField(spec, "seq").value_or(head_seq_);
      head_hash_ = StrField(spec, "hash");
    }
    opts.continue_token = page->continue_token;
  } while (!opts.continue_token.empty());
  head_loaded_ = true;
  return OkStatus();
}

Status AuditLog::Append(AuditEntry entry) {
  Pending p;
  for (std::string* s : {&entry.user, &entry.key_id, &entry.verb, &entry.resource, &entry.tenant,
                         &entry.name, &entry.reason, &entry.request_id}) {
    *s = internal::SanitizeUtf8(*s);
  }
  p.entry = std::move(entry);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return FailedPreconditionError("audit log is shutting down");
    queue_.push_back(&p);
  }
  queued_.notify_one();
  std::unique_lock<std::mutex> lock(mu_);
  done_.wait(lock, [&] { return p.done; });
  return p.result;
}

void AuditLog::WriterLoop() {
  for (;;) {
    std::deque<Pending*> batch;
    {
      std::unique_lock<std::mutex> lock(mu_);
      queued_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, and everything queued is committed
      while (!queue_.empty() && batch.size() < kMaxBatch) {
        batch.push_back(queue_.front());
        queue_.pop_front();
      }
    }
    Status s;
    try {
      s = CommitBatch(batch);
    } catch (const std::exception& e) {
      head_loaded_ = false;
      s = InternalError(std::string("audit: ") + e.what());
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (Pending* p : batch) {
        p->result = s;
        p->done = true;
      }
    }
    done_.notify_all();
  }
}

Status AuditLog::CommitBatch(std::deque<Pending*>& batch) {
  Status last;
  const auto deadline = std::chrono::steady_clock::now() + kConflictRetryFor;
  for (int attempt = 0;; ++attempt) {
    if (!head_loaded_) AICLOUD_RETURN_IF_ERROR(ReloadHead());
    const std::string now = NowRfc3339Ms();
    int64_t seq = head_seq_;
    std::string prev = head_hash_;
    std::vector<store::WriteOp> ops;
    ops.reserve(batch.size() + 1);
    for (const Pending* p : batch) {
      const AuditEntry& e = p->entry;
      ++seq;
      json spec = {{"seq", seq},
                   {"time", now},
                   {"user", e.user},
                   {"keyId", e.key_id},
                   {"verb", e.verb},
                   {"resource", e.resource},
                   {"tenant", e.tenant},
                   {"name", e.name},
                   {"decision", e.allowed ? "allow" : "deny"},
                   {"reason", e.reason},
                   {"policyRevision", e.policy_revision},
                   {"requestId", e.request_id},
                   {"httpStatus", e.http_status},
                   {"prevHash", prev}};
      std::string hash = RecordHash(spec);
      spec["hash"] = hash;
      prev = hash;
      ops.push_back(store::WriteOp::Create({{"apiVersion", "aicloud/v1"},
                                            {"kind", kAuditRecordKind},
                                            {"metadata", {{"name", AuditRecordName(seq)}}},
                                            {"spec", std::move(spec)}}));
    }
    json head = {{"apiVersion", "aicloud/v1"},
                 {"kind", kAuditHeadKind},
                 {"metadata", {{"name", kHeadName}}},
                 {"spec", {{"seq", seq}, {"hash", prev}}}};
    ops.push_back(head_rv_ == 0 ? store::WriteOp::Create(std::move(head))
                                : store::WriteOp::Update(std::move(head), head_rv_));
    StatusOr<std::vector<json>> done = store_->Commit(std::move(ops));
    if (done.ok()) {
      head_seq_ = seq;
      head_hash_ = prev;
      head_rv_ = store::ResourceVersionOf(done->back());
      return OkStatus();
    }
    // Whatever happened, the chain state is re-read before the next commit.
    head_loaded_ = false;
    last = Status(done.status().code(), "audit: " + done.status().message());
    // Conflicts mean another writer moved the chain: retry on top of it.
    if ((done.status().code() != StatusCode::kAborted &&
         done.status().code() != StatusCode::kAlreadyExists) ||
        std::chrono::steady_clock::now() >= deadline) {
      return last;
    }
    // Back off a random while so two writers do not keep colliding in lockstep.
    thread_local std::mt19937 rng{std::random_device{}()};
    int max_us = 100 << std::min(attempt, 5);
    std::this_thread::sleep_for(
        std::chrono::microseconds(std::uniform_int_distribution<int>(0, max_us)(rng)));
  }
}

VerifyResult AuditLog::Verify() {
  VerifyResult r;
  auto fail = [&](std::string problem) {
    r.ok = false;
    r.problem = std::move(problem);
    return r;
  };
  std::optional<int64_t> head_seq;
  std::string head_hash;
  StatusOr<json> head = store_->Get({kAuditHeadKind, "", kHeadName});
  if (head.ok()) {
    head_seq = IntField((*head)["spec"], "seq");
    if (!head_seq) return fail("head has no seq");
    head_hash = StrField((*head)["spec"], "hash");
  } else if (head.status().code() != StatusCode::kNotFound) {
    return fail("reading head: " + head.status().ToString());
  }

  int64_t expected = 1;
  std::string prev = kGenesisHash;
  store::ListOptions opts{.kind = kAuditRecordKind, .tenant = "", .limit = 1000};
  bool past_head = false;
  do {
    StatusOr<store::ListResult> page = store_->List(opts);
    if (!page.ok()) return fail("listing records: " + page.status().ToString());
    for (const json& item : page->items) {
      std::string name = StrField(item.value("metadata", json::object()), "name");
      std::optional<int64_t> seq = SeqFromName(name);
      if (!seq) return fail("record \"" + name + "\": name is not a 12-digit sequence number");
      if (head_seq && *seq > *head_seq) {  // appended after the head was read
        past_head = true;
        break;
      }
      if (*seq != expected) {
        return fail("record " + std::to_string(expected) + " missing (chain broken " +
                    (expected == 1 ? "before " + std::to_string(*seq)
                                   : "between " + std::to_string(expected - 1) + " and " +
                                         std::to_string(*seq)) +
                    ")");
      }
      const json spec = item.value("spec", json::object());
      std::string n = std::to_string(*seq);
      if (IntField(spec, "seq") != seq) return fail("record " + n + ": seq field edited");
      std::string stored = StrField(spec, "hash");
      if (RecordHash(spec) != stored) return fail("record " + n + ": hash mismatch (edited)");
      if (StrField(spec, "prevHash") != prev) {
        return fail("record " + n + ": prevHash does not match record " +
                    std::to_string(*seq - 1) + " (chain broken)");
      }
      prev = stored;
      ++expected;
      ++r.records;
    }
    opts.continue_token = page->continue_token;
  } while (!past_head && !opts.continue_token.empty());

  if (head_seq) {
    if (*head_seq != r.records) {
      return fail("head says " + std::to_string(*head_seq) + " records, found " +
                  std::to_string(r.records));
    }
    if (head_hash != prev) {
      return fail("head hash does not match record " + std::to_string(r.records));
    }
  } else if (r.records > 0) {
    return fail("head missing (found " + std::to_string(r.records) + " records)");
  }
  r.ok = true;
  return r;
}

}  // namespace aicloud::auth
