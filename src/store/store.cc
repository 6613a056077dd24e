#include "store/store.h"

#include <charconv>

namespace aicloud::store {

std::string ObjectKey::ToString() const {
  return kind + " " + (tenant.empty() ? name : tenant + "/" + name);
}

const char* EventTypeName(EventType type) {
  switch (type) {
    case EventType::kAdded: return "ADDED";
    case EventType::kModified: return "MODIFIED";
    case EventType::kDeleted: return "DELETED";
  }
  return "UNKNOWN";
}

int64_t ResourceVersionOf(const json& object) {
  if (!object.is_object()) return 0;
  auto meta = object.find("metadata");
  if (meta == object.end() || !meta->is_object()) return 0;
  auto rv = meta->find("resourceVersion");
  if (rv == meta->end() || !rv->is_string()) return 0;
  const std::string& s = rv->get_ref<const std::string&>();
  int64_t value = 0;
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
  if (ec != std::errc() || ptr != s.data() + s.size()) return 0;
  return value;
}

// The single-object writes are one-op transactions, so every backend implements only Commit
// and the three cannot disagree.
StatusOr<json> Store::Create(json object) {
  std::vector<WriteOp> ops;
  ops.push_back(WriteOp::Create(std::move(object)));
  StatusOr<std::vector<json>> out = Commit(std::move(ops));
  if (!out.ok()) return out.status();
  return std::move((*out)[0]);
}

StatusOr<json> Store::Update(json object, int64_t expected_resource_version) {
  std::vector<WriteOp> ops;
  ops.push_back(WriteOp::Update(std::move(object), expected_resource_version));
  StatusOr<std::vector<json>> out = Commit(std::move(ops));
  if (!out.ok()) return out.status();
  return std::move((*out)[0]);
}

StatusOr<json> Store::Delete(const ObjectKey& key, int64_t expected_resource_version) {
  std::vector<WriteOp> ops;
  ops.push_back(WriteOp::Delete(key, expected_resource_version));
  StatusOr<std::vector<json>> out = Commit(std::move(ops));
  if (!out.ok()) return out.status();
  return std::move((*out)[0]);
}

}  // namespace aicloud::store
