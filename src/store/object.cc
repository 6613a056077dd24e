#include "store/object.h"

#include "core/clock.h"

#include <cctype>
#include <ctime>
#include <mutex>
#include <random>

namespace aicloud::store::internal {
namespace {

bool IsLowerAlnum(char c) {
  return std::islower(static_cast<unsigned char>(c)) || std::isdigit(static_cast<unsigned char>(c));
}

// DNS subdomain (names) or DNS label (tenants, no dots), as Kubernetes names objects.
std::string DnsNameProblem(const std::string& s, size_t max_len, bool allow_dot) {
  if (s.empty()) return "must not be empty";
  if (s.size() > max_len) return "must be at most " + std::to_string(max_len) + " characters";
  for (char c : s) {
    if (!IsLowerAlnum(c) && c != '-' && !(allow_dot && c == '.')) {
      return std::string("has invalid character '") + c + "' (allowed: a-z 0-9 -" +
             (allow_dot ? " ." : "") + ")";
    }
  }
  if (!IsLowerAlnum(s.front()) || !IsLowerAlnum(s.back())) {
    return "must start and end with a lowercase letter or digit";
  }
  return "";
}

std::string NewUid() {
  // One generator per process; uids only need to be unique, and the lock is held for a few ns.
  static std::mutex mu;
  static std::mt19937_64 gen{std::random_device{}() ^
                             (static_cast<uint64_t>(std::random_device{}()) << 32)};
  uint64_t hi, lo;
  {
    std::lock_guard<std::mutex> lock(mu);
    hi = gen();
    lo = gen();
  }
  hi = (hi & ~0xF000ULL) | 0x4000ULL;                  // version 4
  lo = (lo & ~(0xC000ULL << 48)) | (0x8000ULL << 48);  // RFC 4122 variant
  char buf[37];
  std::snprintf(buf, sizeof(buf), "%08x-%04x-%04x-%04x-%012llx", static_cast<unsigned>(hi >> 32),
                static_cast<unsigned>((hi >> 16) & 0xFFFF), static_cast<unsigned>(hi & 0xFFFF),
                static_cast<unsigned>(lo >> 48),
                static_cast<unsigned long long>(lo & 0xFFFFFFFFFFFFULL));
  return buf;
}

Status ConflictError(const ObjectKey& key, int64_t expected, int64_t current) {
  return Status(StatusCode::kAborted, key.ToString() + ": resourceVersion conflict: expected " +
                                          std::to_string(expected) + ", current " +
                                          std::to_string(current));
}

// Applies one op; `out` receives the document to return.
Status ApplyOne(const WriteOp& op, int64_t revision, TxnView& view, json& out) {
  ObjectKey key = op.key;
  if (op.type != WriteOp::Type::kDelete) {
    StatusOr<ObjectKey> k = ValidateObject(op.object);
    if (!k.ok()) return k.status();
    key = std::move(*k);
  } else if (key.kind.empty() || key.name.empty()) {
    return InvalidArgumentError("delete: kind and name must not be empty");
  }
  StatusOr<std::optional<json>> current = view.Read(key);
  if (!current.ok()) return current.status();

  switch (op.type) {
    case WriteOp::Type::kCreate: {
      if (current->has_value()) return AlreadyExistsError(key.ToString() + " already exists");
      out = op.object;
      json& meta = out["metadata"];
      meta["uid"] = NewUid();
      meta["createdAt"] = NowRfc3339();
      meta["resourceVersion"] = std::to_string(revision);
      return view.Write(key, EventType::kAdded, out, revision);
    }
    case WriteOp::Type::kUpdate:
    case WriteOp::Type::kDelete: {
      if (!current->has_value()) return NotFoundError(key.ToString() + " not found");
      const json& old = **current;
      int64_t current_rv = ResourceVersionOf(old);
      if (op.expected_resource_version != 0 && op.expected_resource_version != current_rv) {
        return ConflictError(key, op.expected_resource_version, current_rv);
      }
      if (op.type == WriteOp::Type::kDelete) {
        out = old;
        return view.Write(key, EventType::kDeleted, out, revision);
      }
      out = op.object;
      json& meta = out["metadata"];
      meta["uid"] = old["metadata"].value("uid", "");
      meta["createdAt"] = old["metadata"].value("createdAt", "");
      meta["resourceVersion"] = std::to_string(revision);
      return view.Write(key, EventType::kModified, out, revision);
    }
  }
  return InternalError("unknown write op");
}

std::string HexEncode(const std::string& s) {
  static const char* kDigits = "0123456789abcdef";
  std::string out;
  out.reserve(s.size() * 2);
  for (unsigned char c : s) {
    out += kDigits[c >> 4];
    out += kDigits[c & 15];
  }
  return out;
}

std::optional<std::string> HexDecode(const std::string& s) {
  if (s.size() % 2 != 0) return std::nullopt;
  auto nibble = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  std::string out;
  for (size_t i = 0; i < s.size(); i += 2) {
    int hi = nibble(s[i]), lo = nibble(s[i + 1]);
    if (hi < 0 || lo < 0) return std::nullopt;
    out += static_cast<char>(hi * 16 + lo);
  }
  return out;
}

}  // namespace

StatusOr<ObjectKey> ValidateObject(const json& object) {
  if (!object.is_object()) return InvalidArgumentError("object must be a JSON object");
  auto kind_it = object.find("kind");
  if (kind_it == object.end() || !kind_it->is_string() || kind_it->get<std::string>().empty()) {
    return InvalidArgumentError("kind: must be a non-empty string");
  }
  std::string kind = kind_it->get<std::string>();
  if (kind.size() > 63 || !std::isupper(static_cast<unsigned char>(kind[0]))) {
    return InvalidArgumentError("kind: \"" + kind +
                                "\" must start with an uppercase letter (at most 63 characters)");
  }
  for (char c : kind) {
    if (!std::isalnum(static_cast<unsigned char>(c))) {
      return InvalidArgumentError("kind: \"" + kind + "\" has invalid character '" + c + "'");
    }
  }
  auto meta_it = object.find("metadata");
  if (meta_it == object.end() || !meta_it->is_object()) {
    return InvalidArgumentError("metadata: must be an object");
  }
  const json& meta = *meta_it;
  auto name_it = meta.find("name");
  if (name_it == meta.end() || !name_it->is_string()) {
    return InvalidArgumentError("metadata.name: must be a string");
  }
  std::string name = name_it->get<std::string>();
  if (std::string p = DnsNameProblem(name, 253, true); !p.empty()) {
    return InvalidArgumentError("metadata.name: \"" + name + "\" " + p);
  }
  std::string tenant;
  if (auto t = meta.find("tenant"); t != meta.end() && !t->is_null()) {
    if (!t->is_string()) return InvalidArgumentError("metadata.tenant: must be a string");
    tenant = t->get<std::string>();
    if (!tenant.empty()) {
      if (std::string p = DnsNameProblem(tenant, 63, false); !p.empty()) {
        return InvalidArgumentError("metadata.tenant: \"" + tenant + "\" " + p);
      }
    }
  }
  if (auto l = meta.find("labels"); l != meta.end() && !l->is_null()) {
    if (!l->is_object()) return InvalidArgumentError("metadata.labels: must be an object");
    for (const auto& [k, v] : l->items()) {
      if (std::string p = LabelKeyProblem(k); !p.empty()) {
        return InvalidArgumentError("metadata.labels: \"" + k + "\": " + p);
      }
      if (!v.is_string()) {
        return InvalidArgumentError("metadata.labels." + k + ": value must be a string");
      }
      if (std::string p = LabelValueProblem(v.get<std::string>()); !p.empty()) {
        return InvalidArgumentError("metadata.labels." + k + ": " + p);
      }
    }
  }
  return ObjectKey{std::move(kind), std::move(tenant), std::move(name)};
}

StatusOr<std::vector<json>> ApplyOps(const std::vector<WriteOp>& ops, int64_t* revision,
                                     TxnView& view) {
  if (ops.empty()) return InvalidArgumentError("transaction has no operations");
  std::vector<json> out(ops.size());
  for (size_t i = 0; i < ops.size(); ++i) {
    Status s = ApplyOne(ops[i], *revision + 1, view, out[i]);
    if (!s.ok()) {
      if (ops.size() == 1) return s;
      return Status(s.code(), "op " + std::to_string(i + 1) + " of " + std::to_string(ops.size()) +
                                  ": " + s.message());
    }
    ++*revision;
  }
  return out;
}

std::string EncodeContinueToken(const ContinueToken& token) {
  json j = {{"k", token.kind},
            {"s", token.selector},
            {"at", token.after_tenant},
            {"an", token.after_name}};
  j["t"] = token.tenant ? json(*token.tenant) : json(nullptr);
  return HexEncode(j.dump());
}

StatusOr<std::optional<ContinueToken>> DecodeContinueToken(const ListOptions& options) {
  if (options.continue_token.empty()) return std::optional<ContinueToken>();
  Status bad = InvalidArgumentError(
      "continue token: malformed (pass the token of the previous "
      "page unchanged)");
  std::optional<std::string> text = HexDecode(options.continue_token);
  if (!text) return bad;
  json j = json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("k") || !j["k"].is_string() || !j.contains("s") ||
      !j["s"].is_string() || !j.contains("at") || !j["at"].is_string() || !j.contains("an") ||
      !j["an"].is_string() || !j.contains("t") || !(j["t"].is_string() || j["t"].is_null())) {
    return bad;
  }
  ContinueToken t;
  t.kind = j["k"];
  t.selector = j["s"];
  t.after_tenant = j["at"];
  t.after_name = j["an"];
  if (j["t"].is_string()) t.tenant = j["t"].get<std::string>();
  if (t.kind != options.kind || t.tenant != options.tenant ||
      t.selector != options.label_selector) {
    return InvalidArgumentError(
        "continue token: issued for another kind, tenant or label "
        "selector than this list");
  }
  return std::optional<ContinueToken>(std::move(t));
}

bool PageBuilder::Offer(json object) {
  if (!selector_.Matches(object["metadata"].value("labels", json()))) return true;
  items_.push_back(std::move(object));
  return options_.limit == 0 || static_cast<int64_t>(items_.size()) <= options_.limit;
}

ListResult PageBuilder::Finish(int64_t resource_version) {
  ListResult result;
  result.resource_version = resource_version;
  if (options_.limit > 0 && static_cast<int64_t>(items_.size()) > options_.limit) {
    items_.pop_back();  // the look-ahead item: proof that another page exists
    const json& last = items_.back()["metadata"];
    ContinueToken t{options_.kind, options_.tenant, options_.label_selector,
                    last.value("tenant", ""), last.value("name", "")};
    result.continue_token = EncodeContinueToken(t);
  }
  result.items = std::move(items_);
  return result;
}

StatusOr<LabelSelector> CheckListOptions(const ListOptions& options) {
  if (options.kind.empty()) return InvalidArgumentError("list: kind must not be empty");
  if (options.limit < 0) {
    return InvalidArgumentError("list: limit must be >= 0, got " + std::to_string(options.limit));
  }
  return LabelSelector::Parse(options.label_selector);
}

Status TooOldError(int64_t after, int64_t oldest_retained) {
  return OutOfRangeError("too old resource version: " + std::to_string(after) +
                         " (oldest retained change is " + std::to_string(oldest_retained) +
                         "); 410 Gone: re-list and watch from the list's resourceVersion");
}

}  // namespace aicloud::store::internal
