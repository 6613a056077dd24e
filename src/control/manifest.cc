#include "control/manifest.h"

#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/yaml.h>

#include <cmath>
#include <regex>
#include <sstream>

namespace aicloud::control {
namespace {

// --- YAML → JSON ------------------------------------------------------------------------------

// YAML 1.2 core schema resolution of a plain (unquoted, untagged) scalar.
json ResolvePlain(const std::string& s) {
  if (s.empty() || s == "~" || s == "null" || s == "Null" || s == "NULL") return nullptr;
  if (s == "true" || s == "True" || s == "TRUE") return true;
  if (s == "false" || s == "False" || s == "FALSE") return false;
  static const std::regex kInt("[-+]?[0-9]+");
  static const std::regex kFloat("[-+]?(\\.[0-9]+|[0-9]+(\\.[0-9]*)?)([eE][-+]?[0-9]+)?");
  if (s.size() < 40 && std::regex_match(s, kInt)) {
    errno = 0;
    char* end = nullptr;
    long long v = std::strtoll(s.c_str(), &end, 10);
    if (errno == 0) return static_cast<int64_t>(v);
    return std::strtod(s.c_str(), nullptr);  // too large for int64: keep it as a number
  }
  if (s.size() < 64 && std::regex_match(s, kFloat)) return std::strtod(s.c_str(), nullptr);
  return s;
}

// Builds one document's JSON from the parser's events.
class JsonBuilder : public YAML::EventHandler {
 public:
  void OnDocumentStart(const YAML::Mark& mark) override {
    start = mark;
    started = true;
  }
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark& mark, YAML::anchor_t anchor) override {
    CheckAnchor(mark, anchor);
    Add(nullptr, mark);
  }
  void OnAlias(const YAML::Mark& mark, YAML::anchor_t) override {
    Fail(mark, "aliases (*name) are not supported in manifests");
  }
  void OnScalar(const YAML::Mark& mark, const std::string& tag, YAML::anchor_t anchor,
                const std::string& value) override {
    CheckAnchor(mark, anchor);
    if (tag == "?") {
      Add(ResolvePlain(value), mark);
    } else if (tag == "!" || tag == "tag:yaml.org,2002:str") {
      Add(value, mark);
    } else {
      Fail(mark, "tag " + tag + " is not supported");
    }
  }
  void OnSequenceStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t anchor,
                       YAML::EmitterStyle::value) override {
    CheckAnchor(mark, anchor);
    Open(json::array(), mark);
  }
  void OnSequenceEnd() override { Close(); }
  void OnMapStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t anchor,
                  YAML::EmitterStyle::value) override {
    CheckAnchor(mark, anchor);
    Open(json::object(), mark);
  }
  void OnMapEnd() override { Close(); }

  json root;
  bool has_root = false;
  bool started = false;
  YAML::Mark start;
  std::string error;  // first problem, "line:col: message"

 private:
  struct Frame {
    json value;
    std::string pending_key;
    bool has_key = false;
  };

  void CheckAnchor(const YAML::Mark& mark, YAML::anchor_t anchor) {
    if (anchor != YAML::NullAnchor) Fail(mark, "anchors (&name) are not supported in manifests");
  }
  void Fail(const YAML::Mark& mark, const std::string& message) {
    if (error.empty()) {
      error = std::to_string(mark.line + 1) + ":" + std::to_string(mark.column + 1) + ": " + message;
    }
  }
  void Open(json container, const YAML::Mark& mark) {
    if (stack_.size() >= static_cast<size_t>(kMaxDepth)) {
      Fail(mark, "nested deeper than " + std::to_string(kMaxDepth) + " levels");
    }
    if (!stack_.empty() && stack_.back().value.is_object() && !stack_.back().has_key) {
      Fail(mark, "a map key must be a plain value, not a map or list");
    }
    stack_.push_back(Frame{std::move(container), {}, false});
  }
  void Close() {
    if (stack_.empty()) return;
    json done = std::move(stack_.back().value);
    stack_.pop_back();
    Add(std::move(done), YAML::Mark());
  }
  void Add(json v, const YAML::Mark& mark) {
    if (stack_.empty()) {
      root = std::move(v);
      has_root = true;
      return;
    }
    Frame& top = stack_.back();
    if (top.value.is_array()) {
      top.value.push_back(std::move(v));
      return;
    }
    if (!top.has_key) {
      if (v.is_string()) {
        top.pending_key = v.get<std::string>();
      } else if (v.is_primitive() && !v.is_null()) {
        top.pending_key = v.dump();
      } else {
        Fail(mark, "a map key must be a plain value");
      }
      top.has_key = true;
      if (top.value.contains(top.pending_key)) {
        Fail(mark, "duplicate key \"" + top.pending_key + "\"");
      }
      return;
    }
    top.value[top.pending_key] = std::move(v);
    top.has_key = false;
  }

  std::vector<Frame> stack_;
};

Status SyntaxError(std::string_view source, const std::string& where_and_what) {
  return InvalidArgumentError(std::string(source) + ":" + where_and_what);
}

StatusOr<std::vector<Manifest>> ParseYaml(std::string_view text, std::string_view source) {
  std::vector<Manifest> out;
  std::istringstream in{std::string(text)};
  try {
    YAML::Parser parser(in);
    int64_t last_pos = -1;
    while (true) {
      JsonBuilder doc;
      if (!parser.HandleNextDocument(doc)) break;
      if (!doc.error.empty()) return SyntaxError(source, doc.error + " (yaml)");
      // yaml-cpp 0.7 can report a document without consuming input on some malformed streams
      // (jbeder/yaml-cpp#1040); without this check the loop would never end.
      if (doc.started && doc.start.pos <= last_pos) {
        return SyntaxError(source, std::to_string(doc.start.line + 1) + ":" +
                                       std::to_string(doc.start.column + 1) +
                                       ": unexpected character (yaml)");
      }
      if (doc.started) last_pos = doc.start.pos;
      if (!doc.has_root || doc.root.is_null()) continue;
      if (out.size() >= kMaxDocuments) {
        return InvalidArgumentError(std::string(source) + ": more than " +
                                    std::to_string(kMaxDocuments) + " documents");
      }
      out.push_back(Manifest{std::move(doc.root), doc.started ? doc.start.line + 1 : 1});
    }
  } catch (const YAML::Exception& e) {
    return SyntaxError(source, std::to_string(e.mark.line + 1) + ":" +
                                   std::to_string(e.mark.column + 1) + ": " + e.msg + " (yaml)");
  }
  return out;
}

StatusOr<std::vector<Manifest>> ParseJson(std::string_view text, std::string_view source) {
  json root = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded()) {
    // Parse again with exceptions only to get the position of the problem.
    try {
      json ignored = json::parse(text);
    (void)ignored;
    } catch (const json::parse_error& e) {
      std::string what = e.what();
      // "[json.exception.parse_error.101] parse error at line 1, column 5: ..."
      size_t at = what.find("parse error");
      return InvalidArgumentError(std::string(source) + ": json: " +
                                  (at == std::string::npos ? what : what.substr(at)));
    } catch (const std::exception& e) {
      return InvalidArgumentError(std::string(source) + ": json: " + e.what());
    }
    return InvalidArgumentError(std::string(source) + ": json: malformed");
  }
  std::vector<Manifest> out;
  if (root.is_array()) {
    if (root.size() > kMaxDocuments) {
      return InvalidArgumentError(std::string(source) + ": more than " +
                                  std::to_string(kMaxDocuments) + " documents");
    }
    for (json& item : root) out.push_back(Manifest{std::move(item), 1});
  } else {
    out.push_back(Manifest{std::move(root), 1});
  }
  return out;
}

// --- schemas ----------------------------------------------------------------------------------

enum class T {
  kString,
  kInt,         // integer (no fraction)
  kNumber,      // integer or float
  kBool,
  kObject,      // with `fields`
  kArray,       // of `item` (and `fields` when item is kObject)
  kStringMap,   // string → string
  kIntMap,      // string → integer
  kQuantity,    // "500m", "4Gi", or a number
  kStringOrList,
};

struct Field {
  std::string name;
  T type = T::kString;
  bool required = false;
  std::vector<Field> fields = {};  // kObject, or kArray of kObject
  T item = T::kString;             // kArray
};

const char* TypeName(T t) {
  switch (t) {
    case T::kString: return "a string";
    case T::kInt: return "an integer";
    case T::kNumber: return "a number";
    case T::kBool: return "true or false";
    case T::kObject: return "an object";
    case T::kArray: return "a list";
    case T::kStringMap: return "a map of strings";
    case T::kIntMap: return "a map of integers";
    case T::kQuantity: return "a quantity such as 500m, 2, 4Gi";
    case T::kStringOrList: return "a string or a list of strings";
  }
  return "?";
}

std::string Join(const std::string& path, const std::string& name) {
  return path.empty() ? name : path + "." + name;
}

Status FieldError(const std::string& path, const std::string& message) {
  return InvalidArgumentError(path + ": " + message);
}

bool IsInteger(const json& v) {
  if (v.is_number_integer()) return true;
  if (v.is_number_float()) {
    double d = v.get<double>();
    return std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9e15;
  }
  return false;
}

Status CheckObject(const json& v, const std::vector<Field>& fields, const std::string& path);

Status CheckValue(const json& v, const Field& f, const std::string& path) {
  switch (f.type) {
    case T::kString:
      if (!v.is_string()) return FieldError(path, std::string("must be ") + TypeName(f.type));
      return OkStatus();
    case T::kInt:
      if (!IsInteger(v)) return FieldError(path, std::string("must be ") + TypeName(f.type));
      return OkStatus();
    case T::kNumber:
      if (!v.is_number()) return FieldError(path, std::string("must be ") + TypeName(f.type));
      return OkStatus();
    case T::kBool:
      if (!v.is_boolean()) return FieldError(path, std::string("must be ") + TypeName(f.type));
      return OkStatus();
    case T::kQuantity:
      if (!v.is_string() && !v.is_number()) {
        return FieldError(path, std::string("must be ") + TypeName(f.type));
      }
      return OkStatus();
    case T::kStringOrList:
      if (v.is_string()) return OkStatus();
      if (!v.is_array()) return FieldError(path, std::string("must be ") + TypeName(f.type));
      for (size_t i = 0; i < v.size(); ++i) {
        if (!v[i].is_string()) {
          return FieldError(path + "[" + std::to_string(i) + "]", "must be a string");
        }
      }
      return OkStatus();
    case T::kStringMap:
    case T::kIntMap:
      if (!v.is_object()) return FieldError(path, std::string("must be ") + TypeName(f.type));
      for (const auto& [k, item] : v.items()) {
        if (f.type == T::kStringMap && !item.is_string()) {
          return FieldError(Join(path, k), "must be a string");
        }
        if (f.type == T::kIntMap && !IsInteger(item)) {
          return FieldError(Join(path, k), "must be an integer");
        }
      }
      return OkStatus();
    case T::kObject:
      if (!v.is_object()) return FieldError(path, std::string("must be ") + TypeName(f.type));
      return CheckObject(v, f.fields, path);
    case T::kArray: {
      if (!v.is_array()) return FieldError(path, std::string("must be ") + TypeName(f.type));
      Field item{"", f.item, false, f.fields, T::kString};
      for (size_t i = 0; i < v.size(); ++i) {
        AICLOUD_RETURN_IF_ERROR(CheckValue(v[i], item, path + "[" + std::to_string(i) + "]"));
      }
      return OkStatus();
    }
  }
  return OkStatus();
}

Status CheckObject(const json& v, const std::vector<Field>& fields, const std::string& path) {
  for (const auto& [k, item] : v.items()) {
    const Field* f = nullptr;
    for (const Field& c : fields) {
      if (c.name == k) f = &c;
    }
    if (f == nullptr) {
      std::string known;
      for (const Field& c : fields) known += (known.empty() ? "" : ", ") + c.name;
      return FieldError(Join(path, k), "unknown field (known: " + known + ")");
    }
    if (item.is_null() && !f->required) continue;
    AICLOUD_RETURN_IF_ERROR(CheckValue(item, *f, Join(path, k)));
  }
  for (const Field& c : fields) {
    if (c.required && (!v.contains(c.name) || v[c.name].is_null())) {
      return FieldError(Join(path, c.name), "required");
    }
  }
  return OkStatus();
}

using S = std::vector<Field>;

const S& TenantSpec() {
  static const S s = {
      {"displayName", T::kString},
      {"sleeping", T::kBool},
      {"cohort", T::kString},
      {"maxGpusPerJob", T::kInt},
      {"requireLimits", T::kBool},
      {"quota", T::kObject, false,
       {{"gpus", T::kInt}, {"gpusSoft", T::kInt}, {"cpuMillis", T::kInt}}},
      // Gateway limits shared by the tenant's keys (0 or absent: none).
      {"serving", T::kObject, false,
       {{"rpm", T::kInt}, {"tpm", T::kInt}, {"budgetTokens", T::kInt}, {"budgetCost", T::kNumber},
        {"budgetPeriodSeconds", T::kInt}}},
  };
  return s;
}

const S& QueueSpec() {
  static const S s = {
      {"cohort", T::kString},
      {"nominal", T::kIntMap},
      {"borrowingLimit", T::kIntMap},
      {"lendingLimit", T::kIntMap},
      {"weight", T::kNumber},
  };
  return s;
}

const S& RoleSpec() {
  static const S s = {
      {"rules", T::kArray, true,
       {{"verbs", T::kArray, true, {}, T::kString}, {"resources", T::kArray, true, {}, T::kString}},
       T::kObject},
  };
  return s;
}

const S& RoleBindingSpec() {
  static const S s = {
      {"role", T::kString, true},
      {"subjects", T::kArray, true, {}, T::kString},
  };
  return s;
}

const S& NodeSpec() {
  static const S s = {
      {"cpuMillis", T::kInt, true},
      {"memoryBytes", T::kInt, true},
      {"gpus", T::kArray, false,
       {{"index", T::kInt}, {"model", T::kString, true}, {"uuid", T::kString},
        {"memoryBytes", T::kInt}, {"numa", T::kInt}, {"nvlinkDomain", T::kInt},
        {"pcieSwitch", T::kInt}, {"migEnabled", T::kBool}},
       T::kObject},
      {"labels", T::kStringMap},
      {"taints", T::kArray, false,
       {{"key", T::kString, true}, {"value", T::kString}, {"effect", T::kString}},
       T::kObject},
      {"rack", T::kString},
      {"pool", T::kString},
      {"unschedulable", T::kBool},
      {"hostname", T::kString},
      {"address", T::kString},  // where other machines reach this node (deployment replicas)
      {"sandbox", T::kString},  // set by the agent: "on: ..." or "off: <why>"
      {"cgroups", T::kString},  // set by the agent: "cgroup v1 at ..." or "no cgroup limits: ..."
  };
  return s;
}

const S& RackSpec() {
  static const S s = {
      {"powerBudgetKw", T::kNumber},
      {"cooling", T::kString},
      {"leafSwitch", T::kInt},
  };
  return s;
}

// spec.resources of a Job and of a Deployment's replicas (one worker's share).
Field Resources() {
  return {"resources", T::kObject, false,
          {{"cpu", T::kQuantity},
           {"memory", T::kQuantity},
           {"gpu", T::kObject, false,
            {{"count", T::kInt},
             {"model", T::kStringOrList},
             {"topology", T::kString},
             {"profile", T::kString},
             {"fraction", T::kNumber},
             {"memoryGiB", T::kNumber}}}}};
}

const S& JobSpec() {
  static const S s = {
      {"workers", T::kInt},
      {"minAvailable", T::kInt},
      {"command", T::kStringOrList, true},
      {"env", T::kStringMap},
      {"workingDir", T::kString},
      Resources(),
      {"restartPolicy", T::kString},
      {"maxRetries", T::kInt},
      {"priority", T::kInt},
      {"queue", T::kString},
      {"preemptible", T::kBool},
      {"terminationGraceSeconds", T::kInt},
      {"pool", T::kString},
      {"tolerations", T::kArray, false,
       {{"key", T::kString, true}, {"value", T::kString}, {"operator", T::kString},
        {"effect", T::kString}},
       T::kObject},
      {"isolation", T::kString},  // none | network
  };
  return s;
}

const S& DeploymentSpec() {
  static const S s = {
      {"model", T::kString, true},
      {"servedModelName", T::kString},
      {"adapters", T::kArray, false, {{"name", T::kString, true}, {"path", T::kString, true}}, T::kObject},
      Resources(),
      {"replicas", T::kObject, false, {{"min", T::kInt}, {"max", T::kInt}}},
      {"slo", T::kObject, false,
       {{"ttftP99Ms", T::kNumber}, {"tpotP99Ms", T::kNumber}, {"tokensPerS", T::kNumber}}},
      {"profile", T::kString},
      {"scaleToZeroSeconds", T::kInt},
      {"lane", T::kString},
      {"autoscaler", T::kObject, false,
       {{"policy", T::kString},
        {"targetConcurrency", T::kNumber},
        {"capacity", T::kObject, false, {{"prefillTokensPerS", T::kNumber}, {"decodeTokensPerS", T::kNumber}}}}},
      {"engine", T::kObject, false,
       {{"threads", T::kInt},
        {"kvCacheGiB", T::kNumber},
        {"dtype", T::kString},
        {"maxNumSeqs", T::kInt},
        {"prefillOrder", T::kString},
        {"maxOvertakeSeconds", T::kNumber},
        {"args", T::kArray, false, {}, T::kString}}},
      {"strategy", T::kObject, false,
       {{"type", T::kString}, {"maxSurge", T::kInt}, {"maxUnavailable", T::kInt}, {"canaryWeight", T::kInt}}},
      {"queue", T::kString},
      {"priority", T::kInt},
  };
  return s;
}

const S& UserSpec() {
  static const S s = {{"displayName", T::kString}, {"email", T::kString}};
  return s;
}

const S& EventSpec() {
  static const S s = {
      {"type", T::kString},
      {"reason", T::kString},
      {"message", T::kString},
      {"involvedObject", T::kObject, false, {{"kind", T::kString}, {"name", T::kString}}},
      {"count", T::kInt},
  };
  return s;
}

const S* SpecSchema(std::string_view kind) {
  if (kind == "Tenant") return &TenantSpec();
  if (kind == "Queue") return &QueueSpec();
  if (kind == "User") return &UserSpec();
  if (kind == "Role") return &RoleSpec();
  if (kind == "RoleBinding") return &RoleBindingSpec();
  if (kind == "Node") return &NodeSpec();
  if (kind == "Rack") return &RackSpec();
  if (kind == "Job") return &JobSpec();
  if (kind == "Deployment") return &DeploymentSpec();
  if (kind == "Event") return &EventSpec();
  return nullptr;  // server-written kinds: spec checked by their writers
}

bool ValidName(const std::string& s) {
  if (s.empty() || s.size() > 253) return false;
  for (char c : s) {
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '.' || c == '_')) {
      return false;
    }
  }
  return std::isalnum(static_cast<unsigned char>(s.front())) &&
         std::isalnum(static_cast<unsigned char>(s.back()));
}

}  // namespace

StatusOr<std::vector<Manifest>> ParseManifests(std::string_view text, std::string_view source) {
  if (text.size() > kMaxManifestBytes) {
    return InvalidArgumentError(std::string(source) + ": " + std::to_string(text.size()) +
                                " bytes is larger than the " +
                                std::to_string(kMaxManifestBytes >> 20) + " MiB limit");
  }
  size_t first = text.find_first_not_of(" \t\r\n");
  if (first == std::string_view::npos) return std::vector<Manifest>{};
  if (text.find('\0') != std::string_view::npos) {
    return InvalidArgumentError(std::string(source) + ": contains a NUL byte (binary file?)");
  }
  StatusOr<std::vector<Manifest>> docs = (text[first] == '{' || text[first] == '[')
                                             ? ParseJson(text, source)
                                             : ParseYaml(text, source);
  if (!docs.ok()) return docs;
  for (size_t i = 0; i < docs->size(); ++i) {
    if (!(*docs)[i].object.is_object()) {
      return InvalidArgumentError(std::string(source) + ":" + std::to_string((*docs)[i].line) +
                                  ": document " + std::to_string(i + 1) +
                                  " is not an object (expected apiVersion, kind, metadata, spec)");
    }
  }
  return docs;
}

const std::vector<KindInfo>& Kinds() {
  static const std::vector<KindInfo> kinds = {
      {"Tenant", "tenants", false, true},       {"Queue", "queues", true, true},
      {"User", "users", false, true},           {"Role", "roles", false, true},
      {"RoleBinding", "rolebindings", true, true}, {"ApiKey", "apikeys", false, false},
      {"Node", "nodes", false, true},           {"Rack", "racks", false, true},
      {"Job", "jobs", true, true},              {"Event", "events", true, false},
      {"Deployment", "deployments", true, true},
      {"AuditRecord", "auditrecords", false, false},
  };
  return kinds;
}

const KindInfo* FindKind(std::string_view kind) {
  for (const KindInfo& k : Kinds()) {
    if (k.kind == kind) return &k;
  }
  return nullptr;
}

const KindInfo* FindKindByPlural(std::string_view plural) {
  for (const KindInfo& k : Kinds()) {
    if (k.plural == plural) return &k;
  }
  return nullptr;
}

const KindInfo* FindKindLoose(std::string_view name) {
  std::string lower;
  for (char c : name) lower += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  static const std::vector<std::pair<std::string_view, std::string_view>> kShort = {
      {"no", "nodes"}, {"rb", "rolebindings"}, {"ev", "events"}, {"audit", "auditrecords"},
      {"key", "apikeys"}, {"keys", "apikeys"}, {"deploy", "deployments"}};
  for (const auto& [s, plural] : kShort) {
    if (lower == s) return FindKindByPlural(plural);
  }
  for (const KindInfo& k : Kinds()) {
    std::string kind_lower;
    for (char c : k.kind) kind_lower += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (lower == kind_lower || lower == k.plural) return &k;
  }
  return nullptr;
}

Status ValidateObject(const json& object) {
  if (!object.is_object()) return FieldError("", "must be an object");
  static const std::vector<std::string> kTop = {"apiVersion", "kind", "metadata", "spec", "status"};
  for (const auto& [k, v] : object.items()) {
    if (std::find(kTop.begin(), kTop.end(), k) == kTop.end()) {
      return FieldError(k, "unknown field (known: apiVersion, kind, metadata, spec, status)");
    }
  }
  if (!object.contains("apiVersion") || object["apiVersion"] != kApiVersion) {
    return FieldError("apiVersion", "must be \"" + std::string(kApiVersion) + "\"");
  }
  if (!object.contains("kind") || !object["kind"].is_string()) {
    return FieldError("kind", "required");
  }
  const std::string kind = object["kind"].get<std::string>();
  const KindInfo* info = FindKind(kind);
  if (info == nullptr) {
    std::string known;
    for (const KindInfo& k : Kinds()) known += (known.empty() ? "" : ", ") + std::string(k.kind);
    return FieldError("kind", "unknown kind \"" + kind + "\" (known: " + known + ")");
  }
  if (!object.contains("metadata") || !object["metadata"].is_object()) {
    return FieldError("metadata", "required (an object with at least a name)");
  }
  static const S kMeta = {{"name", T::kString, true}, {"tenant", T::kString},
                          {"labels", T::kStringMap},  {"annotations", T::kStringMap},
                          {"uid", T::kString},        {"createdAt", T::kString},
                          {"resourceVersion", T::kString}};
  const json& meta = object["metadata"];
  AICLOUD_RETURN_IF_ERROR(CheckObject(meta, kMeta, "metadata"));
  const std::string name = meta["name"].get<std::string>();
  if (!ValidName(name)) {
    return FieldError("metadata.name",
                      "\"" + name + "\" must be 1-253 lower-case letters, digits, '-', '.', '_', "
                      "starting and ending with a letter or digit");
  }
  std::string tenant = meta.contains("tenant") && meta["tenant"].is_string()
                           ? meta["tenant"].get<std::string>()
                           : "";
  if (info->tenant_scoped && kind != "RoleBinding" && tenant.empty()) {
    return FieldError("metadata.tenant", "required: a " + kind + " belongs to a tenant");
  }
  if (!info->tenant_scoped && !tenant.empty()) {
    return FieldError("metadata.tenant", "must be empty: a " + kind + " is cluster-scoped");
  }
  if (!tenant.empty() && !ValidName(tenant)) {
    return FieldError("metadata.tenant", "\"" + tenant + "\" is not a valid tenant name");
  }
  const S* spec = SpecSchema(kind);
  if (spec != nullptr) {
    if (!object.contains("spec") || object["spec"].is_null()) {
      bool needs = std::any_of(spec->begin(), spec->end(), [](const Field& f) { return f.required; });
      if (needs) return FieldError("spec", "required");
    } else {
      if (!object["spec"].is_object()) return FieldError("spec", "must be an object");
      AICLOUD_RETURN_IF_ERROR(CheckObject(object["spec"], *spec, "spec"));
    }
  }
  return OkStatus();
}

std::string ValidationFieldOf(const Status& status) {
  const std::string& m = status.message();
  size_t colon = m.find(": ");
  if (colon == std::string::npos || colon == 0) return "";
  std::string field = m.substr(0, colon);
  if (field.find_first_of(" /:") != std::string::npos) return "";
  return field;
}

}  // namespace aicloud::control
