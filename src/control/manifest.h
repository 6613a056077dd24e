// Manifests: the YAML or JSON documents users `aicloud apply -f` and the API accepts, turned into
// the JSON objects the store keeps, and checked against each kind's schema.
//
//   StatusOr<std::vector<Manifest>> docs = ParseManifests(text, "jobs.yaml");
//   // docs->at(1).object["kind"] == "Job"; docs->at(1).line is where that document starts.
//   Status st = ValidateObject(docs->at(1).object);   // "spec.workers: must be an integer >= 1"
//
// Errors name the place: "jobs.yaml:14:3: yaml: illegal map value" for syntax, and
// "<field path>: <problem>" for schema violations (ValidationFieldOf() splits the field off, so
// the API can answer {"error": {"code", "message", "field"}}).
//
// YAML is read with the core schema (plain `3` is an integer, `"3"` a string, `true`/`null`/`~`
// as usual). Anchors and aliases are refused: manifests are small and explicit, and aliases are
// the usual way to make a small document expand into a huge one.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace aicloud::control {

using nlohmann::json;

inline constexpr std::string_view kApiVersion = "aicloud/v1";

struct Manifest {
  json object;
  int line = 1;  // 1-based line where the document starts in its source
};

// Limits that keep a hostile manifest from costing the server much.
inline constexpr size_t kMaxManifestBytes = 4u << 20;
inline constexpr size_t kMaxDocuments = 1000;
inline constexpr int kMaxDepth = 64;

// Parses one or more documents: a JSON object, a JSON array of objects, or a YAML stream whose
// documents are separated by `---`. Empty documents are skipped. `source` names the input in
// errors (a file name, or "request body").
StatusOr<std::vector<Manifest>> ParseManifests(std::string_view text, std::string_view source);

// What the server knows about a kind.
struct KindInfo {
  std::string_view kind;      // "Job"
  std::string_view plural;    // "jobs": the URL segment and the RBAC resource
  bool tenant_scoped = false; // keyed by metadata.tenant (else cluster-scoped, tenant "")
  bool user_writable = true;  // false: only the server writes it (Event, AuditRecord, ApiKey)
};

// Every kind the API serves, in a stable order.
const std::vector<KindInfo>& Kinds();
// nullptr when unknown. Case-sensitive kind ("Job"); plural lower-case ("jobs").
const KindInfo* FindKind(std::string_view kind);
const KindInfo* FindKindByPlural(std::string_view plural);
// Accepts "job", "jobs", "Job" and short names ("node", "no") as kubectl does.
const KindInfo* FindKindLoose(std::string_view name);

// Checks an object against its kind's schema: apiVersion, kind, metadata (name, tenant, labels,
// annotations; server-set uid/createdAt/resourceVersion allowed), spec fields and their types;
// unknown fields are errors. For a tenant-scoped kind metadata.tenant must be set; for a
// cluster-scoped one it must be absent or empty. INVALID_ARGUMENT "<field>: <problem>".
Status ValidateObject(const json& object);

// The field path of a validation error ("spec.workers"), or "" if the message has none.
std::string ValidationFieldOf(const Status& status);

}  // namespace aicloud::control
