#include "cluster/inventory.h"

#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <set>
#include <sstream>
#include <unordered_map>
#include <utility>
#include <vector>

#include "cluster/catalog.h"

namespace aicloud::cluster {
namespace {

// Larger inventories than this are almost certainly the wrong file (a log, a core dump).
constexpr std::uintmax_t kMaxFileBytes = 64u << 20;
constexpr size_t kMaxNameLength = 253;  // a DNS subdomain, as Kubernetes node names are

bool IsDigit(char c) { return c >= '0' && c <= '9'; }
bool IsAlnum(char c) { return IsDigit(c) || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }

// Parses "123" or "123.45" (no sign, no exponent) as an exact fixed-point value scaled by
// 10^scale. False when malformed, when it has more than `scale` fractional digits, or when it is
// too large to scale safely.
bool ParseFixed(std::string_view s, int scale, int64_t* out) {
  size_t dot = s.find('.');
  std::string_view whole = s.substr(0, dot);
  std::string_view frac = dot == std::string_view::npos ? std::string_view() : s.substr(dot + 1);
  if (whole.empty() || whole.size() > 12 || static_cast<int>(frac.size()) > scale) return false;
  if (dot != std::string_view::npos && frac.empty()) return false;
  int64_t v = 0;
  for (char c : whole) {
    if (!IsDigit(c)) return false;
    v = v * 10 + (c - '0');
  }
  for (int i = 0; i < scale; ++i) {
    int digit = 0;
    if (i < static_cast<int>(frac.size())) {
      if (!IsDigit(frac[i])) return false;
      digit = frac[i] - '0';
    }
    v = v * 10 + digit;
  }
  *out = v;
  return true;
}

bool ParseInt(std::string_view s, int64_t* out) {
  if (s.empty()) return false;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
  return ec == std::errc() && end == s.data() + s.size();
}

bool ParseDouble(std::string_view s, double* out) {
  if (s.empty()) return false;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
  return ec == std::errc() && end == s.data() + s.size() && std::isfinite(*out);
}

// Node and rack names end up in logs, metrics labels and CLI arguments, so keep them to the
// characters that survive all three unquoted.
bool IsValidName(std::string_view s) {
  if (s.empty() || s.size() > kMaxNameLength || !IsAlnum(s.front())) return false;
  return std::all_of(s.begin(), s.end(),
                     [](char c) { return IsAlnum(c) || c == '-' || c == '_' || c == '.'; });
}

std::string Quote(std::string_view s) { return "\"" + std::string(s) + "\""; }

std::string Join(const std::string& path, std::string_view key) {
  return path.empty() ? std::string(key) : path + "." + std::string(key);
}

std::string Index(const std::string& path, size_t i) {
  return path + "[" + std::to_string(i) + "]";
}

const char* KindName(const YAML::Node& n) {
  switch (n.Type()) {
    case YAML::NodeType::Map: return "a mapping";
    case YAML::NodeType::Sequence: return "a list";
    case YAML::NodeType::Scalar: return "a scalar";
    case YAML::NodeType::Null: return "null";
    case YAML::NodeType::Undefined: break;
  }
  return "nothing";
}

// A field that is absent and one written with no value (`cpu:`) mean the same: not given.
bool Present(const YAML::Node& v) { return v.IsDefined() && !v.IsNull(); }

// Sees where each document of a YAML stream starts, building nothing.
class DocumentStarts : public YAML::EventHandler {
 public:
  void OnDocumentStart(const YAML::Mark& mark) override { starts.push_back(mark); }
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark&, YAML::anchor_t) override {}
  void OnAlias(const YAML::Mark&, YAML::anchor_t) override {}
  void OnScalar(const YAML::Mark&, const std::string&, YAML::anchor_t,
                const std::string&) override {}
  void OnSequenceStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                       YAML::EmitterStyle::value) override {}
  void OnSequenceEnd() override {}
  void OnMapStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                  YAML::EmitterStyle::value) override {}
  void OnMapEnd() override {}

  std::vector<YAML::Mark> starts;
};

// The GPU section of a node entry, decoded once and stamped onto every replica.
struct GpuSpec {
  enum class NvLink { kNone, kAll, kGroups };
  int count = 0;
  int64_t mem_mib = 0;
  std::vector<int16_t> numa;
  std::vector<int16_t> pcie_switch;
  NvLink nvlink = NvLink::kNone;
  std::vector<std::vector<int>> groups;  // for kGroups
  bool nvlink_given = false;
  int line = 0;  // of the nvlink field, for errors raised per replica
};

class Decoder {
 public:
  explicit Decoder(std::string file) : file_(std::move(file)) {}

  StatusOr<Cluster> Decode(std::string_view yaml);

 private:
  // --- error reporting -------------------------------------------------------------------------

  int LineOf(const YAML::Node& at) const {
    if (!at.IsDefined()) return 1;
    YAML::Mark m = at.Mark();
    return m.line >= 0 ? m.line + 1 : 1;
  }
  Status ErrorAtLine(int line, std::string_view field, std::string_view what) const {
    return InvalidArgumentError(file_ + ":" + std::to_string(line) + ": " + std::string(field) +
                                ": " + std::string(what));
  }
  Status Error(const YAML::Node& at, std::string_view field, std::string_view what) const {
    return ErrorAtLine(LineOf(at), field, what);
  }

  // --- typed field access ----------------------------------------------------------------------

  // Strict decoding: every key of `map` must be in `allowed` and appear once. yaml-cpp keeps
  // repeated keys and lookups return the first, so a repeat would otherwise vanish silently.
  Status CheckFields(const YAML::Node& map, const std::string& path,
                     std::initializer_list<std::string_view> allowed) const {
    std::set<std::string, std::less<>> seen;
    // By value: yaml-cpp iterators hand out temporaries, so a reference would dangle.
    for (const auto& kv : map) {
      const YAML::Node key = kv.first;
      if (!key.IsScalar()) return Error(key, path, "field names must be plain strings");
      const std::string& k = key.Scalar();
      if (std::find(allowed.begin(), allowed.end(), k) == allowed.end()) {
        std::string known;
        for (std::string_view a : allowed) known += (known.empty() ? "" : ", ") + std::string(a);
        return Error(key, Join(path, k), "unknown field; known fields: " + known);
      }
      if (!seen.insert(k).second) return Error(key, Join(path, k), "field given more than once");
    }
    return OkStatus();
  }

  Status ExpectMap(const YAML::Node& v, const std::string& path) const {
    if (!v.IsMap()) return Error(v, path, std::string("expected a mapping, got ") + KindName(v));
    return OkStatus();
  }
  Status ExpectList(const YAML::Node& v, const std::string& path) const {
    if (!v.IsSequence()) return Error(v, path, std::string("expected a list, got ") + KindName(v));
    return OkStatus();
  }
  Status ExpectScalar(const YAML::Node& v, const std::string& path, const char* what) const {
    if (!v.IsScalar()) {
      return Error(v, path, std::string("expected ") + what + ", got " + KindName(v));
    }
    return OkStatus();
  }

  Status AsString(const YAML::Node& v, const std::string& path, std::string* out) const {
    AICLOUD_RETURN_IF_ERROR(ExpectScalar(v, path, "a string"));
    *out = v.Scalar();
    return OkStatus();
  }
  Status AsName(const YAML::Node& v, const std::string& path, std::string* out) const {
    AICLOUD_RETURN_IF_ERROR(AsString(v, path, out));
    if (!IsValidName(*out)) {
      return Error(v, path, "invalid name " + Quote(*out) +
                                ": use letters, digits, '-', '_' and '.', starting with a letter "
                                "or digit, at most 253 characters");
    }
    return OkStatus();
  }
  Status AsInt(const YAML::Node& v, const std::string& path, int64_t lo, int64_t hi,
               int64_t* out) const {
    AICLOUD_RETURN_IF_ERROR(ExpectScalar(v, path, "an integer"));
    if (!ParseInt(v.Scalar(), out)) return Error(v, path, "not an integer: " + Quote(v.Scalar()));
    if (*out < lo || *out > hi) {
      return Error(v, path, "must be between " + std::to_string(lo) + " and " +
                                std::to_string(hi) + ", got " + v.Scalar());
    }
    return OkStatus();
  }
  Status AsBool(const YAML::Node& v, const std::string& path, bool* out) const {
    AICLOUD_RETURN_IF_ERROR(ExpectScalar(v, path, "true or false"));
    if (!YAML::convert<bool>::decode(v, *out)) {
      return Error(v, path, "expected true or false, got " + Quote(v.Scalar()));
    }
    return OkStatus();
  }
  Status AsIntList(const YAML::Node& v, const std::string& path, int64_t lo, int64_t hi,
                   std::vector<int16_t>* out) const {
    AICLOUD_RETURN_IF_ERROR(ExpectList(v, path));
    out->clear();
    for (size_t i = 0; i < v.size(); ++i) {
      int64_t x = 0;
      AICLOUD_RETURN_IF_ERROR(AsInt(v[i], Index(path, i), lo, hi, &x));
      out->push_back(static_cast<int16_t>(x));
    }
    return OkStatus();
  }

  // Fetches a required field, erroring at the enclosing mapping when it is missing.
  // (Never assign one YAML::Node to another: yaml-cpp's operator= rebinds the node it held, which
  // would rewrite the document; copy-construct instead.)
  Status Require(const YAML::Node& map, const std::string& path, const char* key) const {
    if (!Present(map[key])) return Error(map, Join(path, key), "required field is missing");
    return OkStatus();
  }

  int32_t InternLeafSwitch(const std::string& name) {
    auto [it, added] = leaf_ids_.emplace(name, static_cast<int32_t>(leaf_ids_.size()));
    return it->second;
  }

  // Fails unless `text` holds at most one YAML document. Deliberately not YAML::LoadAll: in
  // yaml-cpp 0.7 it loops forever, allocating a null document per turn, on input such as a
  // stray "," where the parser reports a document without consuming the offending token
  // (jbeder/yaml-cpp#1040, fixed upstream by #1318/#1319). A bounded walk that checks each
  // document moved forward turns that into an error instead of an out-of-memory kill.
  Status CheckSingleDocument(const std::string& text) const {
    std::istringstream in(text);
    YAML::Parser parser(in);
    DocumentStarts scan;
    while (scan.starts.size() < 2 && parser.HandleNextDocument(scan)) {
    }
    if (scan.starts.size() < 2) return OkStatus();
    const YAML::Mark& first = scan.starts[0];
    const YAML::Mark& second = scan.starts[1];
    const int line = second.line >= 0 ? second.line + 1 : 1;
    if (second.pos == first.pos) {
      const char c = second.pos >= 0 && static_cast<size_t>(second.pos) < text.size()
                         ? text[second.pos]
                         : '?';
      return ErrorAtLine(line, "yaml", "unexpected " + Quote(std::string(1, c)));
    }
    return ErrorAtLine(line, "document",
                       "expected one YAML document, but a second one starts here");
  }

  // --- sections --------------------------------------------------------------------------------

  Status DecodeRack(const YAML::Node& r, const std::string& path);
  Status DecodeNodeEntry(const YAML::Node& e, const std::string& path);
  Status DecodeGpus(const YAML::Node& g, const std::string& path, GpuSpec* spec) const;
  Status DecodeNvLink(const YAML::Node& v, const std::string& path, GpuSpec* spec) const;
  Status DecodeTaints(const YAML::Node& v, const std::string& path, std::vector<Taint>* out) const;
  Status DecodeLabels(const YAML::Node& v, const std::string& path,
                      std::map<std::string, std::string>* out) const;

  std::string file_;
  Cluster cluster_;
  std::unordered_map<std::string, int32_t> leaf_ids_;
  // Per rack: whether it is one NVLink domain, and that domain's id once a GPU needs it.
  std::vector<bool> rack_nvlink_;
  std::vector<int32_t> rack_domain_;
  std::unordered_map<std::string, int> rack_lines_;
  std::unordered_map<std::string, int> node_lines_;
  int32_t next_domain_ = 0;
};

StatusOr<Cluster> Decoder::Decode(std::string_view yaml) {
  const std::string text(yaml);
  AICLOUD_RETURN_IF_ERROR(CheckSingleDocument(text));
  const YAML::Node root = YAML::Load(text);
  if (root.IsNull()) {
    return ErrorAtLine(1, "document", "empty; expected apiVersion: aicloud/v1, kind: Inventory");
  }
  if (!root.IsMap()) {
    return Error(root, "document",
                 std::string("expected a mapping with apiVersion and kind, got ") + KindName(root));
  }
  AICLOUD_RETURN_IF_ERROR(CheckFields(root, "", {"apiVersion", "kind", "racks", "nodes"}));

  std::string s;
  AICLOUD_RETURN_IF_ERROR(Require(root, "", "apiVersion"));
  const YAML::Node api = root["apiVersion"];
  AICLOUD_RETURN_IF_ERROR(AsString(api, "apiVersion", &s));
  if (s != "aicloud/v1") {
    return Error(api, "apiVersion", "unsupported version " + Quote(s) + "; expected aicloud/v1");
  }
  AICLOUD_RETURN_IF_ERROR(Require(root, "", "kind"));
  const YAML::Node kind = root["kind"];
  AICLOUD_RETURN_IF_ERROR(AsString(kind, "kind", &s));
  if (s != "Inventory") return Error(kind, "kind", "expected Inventory, got " + Quote(s));

  // Racks first: nodes refer to them by name.
  const YAML::Node racks = root["racks"];
  if (Present(racks)) {
    AICLOUD_RETURN_IF_ERROR(ExpectList(racks, "racks"));
    for (size_t i = 0; i < racks.size(); ++i) {
      AICLOUD_RETURN_IF_ERROR(DecodeRack(racks[i], Index("racks", i)));
    }
  }
  const YAML::Node nodes = root["nodes"];
  if (Present(nodes)) {
    AICLOUD_RETURN_IF_ERROR(ExpectList(nodes, "nodes"));
    for (size_t i = 0; i < nodes.size(); ++i) {
      AICLOUD_RETURN_IF_ERROR(DecodeNodeEntry(nodes[i], Index("nodes", i)));
    }
  }
  return std::move(cluster_);
}

Status Decoder::DecodeRack(const YAML::Node& r, const std::string& path) {
  AICLOUD_RETURN_IF_ERROR(ExpectMap(r, path));
  AICLOUD_RETURN_IF_ERROR(
      CheckFields(r, path, {"name", "powerBudgetKW", "cooling", "leafSwitch", "nvlinkDomain"}));
  Rack rack;
  AICLOUD_RETURN_IF_ERROR(Require(r, path, "name"));
  const YAML::Node name = r["name"];
  AICLOUD_RETURN_IF_ERROR(AsName(name, Join(path, "name"), &rack.name));
  if (auto [it, added] = rack_lines_.emplace(rack.name, LineOf(name)); !added) {
    return Error(name, Join(path, "name"),
                 "duplicate rack name " + Quote(rack.name) + " (first defined at line " +
                     std::to_string(it->second) + ")");
  }

  if (const YAML::Node v = r["powerBudgetKW"]; Present(v)) {
    const std::string p = Join(path, "powerBudgetKW");
    AICLOUD_RETURN_IF_ERROR(ExpectScalar(v, p, "a number of kilowatts"));
    if (!ParseDouble(v.Scalar(), &rack.power_budget_kw)) {
      return Error(v, p, "not a number: " + Quote(v.Scalar()));
    }
    if (rack.power_budget_kw < 0) return Error(v, p, "must be 0 (unlimited) or more");
  }
  if (const YAML::Node v = r["cooling"]; Present(v)) {
    AICLOUD_RETURN_IF_ERROR(AsString(v, Join(path, "cooling"), &rack.cooling));
    if (rack.cooling != "air" && rack.cooling != "liquid") {
      return Error(v, Join(path, "cooling"),
                   "must be air or liquid, got " + Quote(rack.cooling));
    }
  }
  if (const YAML::Node v = r["leafSwitch"]; Present(v)) {
    std::string leaf;
    AICLOUD_RETURN_IF_ERROR(AsName(v, Join(path, "leafSwitch"), &leaf));
    rack.leaf_switch = InternLeafSwitch(leaf);
  }
  bool nvlink = false;
  if (const YAML::Node v = r["nvlinkDomain"]; Present(v)) {
    AICLOUD_RETURN_IF_ERROR(AsBool(v, Join(path, "nvlinkDomain"), &nvlink));
  }
  cluster_.AddRack(std::move(rack));
  rack_nvlink_.push_back(nvlink);
  rack_domain_.push_back(-1);
  return OkStatus();
}

Status Decoder::DecodeLabels(const YAML::Node& v, const std::string& path,
                             std::map<std::string, std::string>* out) const {
  AICLOUD_RETURN_IF_ERROR(ExpectMap(v, path));
  for (const auto& kv : v) {
    const YAML::Node key = kv.first;
    const YAML::Node value_node = kv.second;
    if (!key.IsScalar() || key.Scalar().empty()) {
      return Error(key, path, "label keys must be non-empty strings");
    }
    const std::string p = Join(path, key.Scalar());
    std::string value;
    if (Present(value_node)) AICLOUD_RETURN_IF_ERROR(AsString(value_node, p, &value));
    if (!out->emplace(key.Scalar(), value).second) {
      return Error(key, p, "label given more than once");
    }
  }
  return OkStatus();
}

Status Decoder::DecodeTaints(const YAML::Node& v, const std::string& path,
                             std::vector<Taint>* out) const {
  AICLOUD_RETURN_IF_ERROR(ExpectList(v, path));
  for (size_t i = 0; i < v.size(); ++i) {
    const YAML::Node t = v[i];
    const std::string p = Index(path, i);
    AICLOUD_RETURN_IF_ERROR(ExpectMap(t, p));
    AICLOUD_RETURN_IF_ERROR(CheckFields(t, p, {"key", "value", "effect"}));
    Taint taint;
    AICLOUD_RETURN_IF_ERROR(Require(t, p, "key"));
    const YAML::Node key = t["key"];
    AICLOUD_RETURN_IF_ERROR(AsString(key, Join(p, "key"), &taint.key));
    if (taint.key.empty()) return Error(key, Join(p, "key"), "must not be empty");
    if (const YAML::Node f = t["value"]; Present(f)) {
      AICLOUD_RETURN_IF_ERROR(AsString(f, Join(p, "value"), &taint.value));
    }
    if (const YAML::Node f = t["effect"]; Present(f)) {
      AICLOUD_RETURN_IF_ERROR(AsString(f, Join(p, "effect"), &taint.effect));
      if (taint.effect != "NoSchedule" && taint.effect != "PreferNoSchedule" &&
          taint.effect != "NoExecute") {
        return Error(f, Join(p, "effect"),
                     "must be NoSchedule, PreferNoSchedule or NoExecute, got " +
                         Quote(taint.effect));
      }
    }
    // As in Kubernetes, one key carries at most one taint per effect; a second would be dead.
    for (const Taint& other : *out) {
      if (other.key == taint.key && other.effect == taint.effect) {
        return Error(t, p, "taint " + taint.key + ":" + taint.effect + " given more than once");
      }
    }
    out->push_back(std::move(taint));
  }
  return OkStatus();
}

Status Decoder::DecodeNvLink(const YAML::Node& v, const std::string& path, GpuSpec* spec) const {
  spec->nvlink_given = true;
  spec->line = LineOf(v);
  if (v.IsScalar()) {
    if (v.Scalar() == "all") {
      spec->nvlink = GpuSpec::NvLink::kAll;
    } else if (v.Scalar() == "none") {
      spec->nvlink = GpuSpec::NvLink::kNone;
    } else {
      return Error(v, path,
                   "expected all, none or a list of GPU index groups, got " + Quote(v.Scalar()));
    }
    return OkStatus();
  }
  if (!v.IsSequence()) {
    return Error(v, path,
                 std::string("expected all, none or a list of GPU index groups, got ") +
                     KindName(v));
  }
  spec->nvlink = GpuSpec::NvLink::kGroups;
  std::vector<bool> used(spec->count, false);
  for (size_t i = 0; i < v.size(); ++i) {
    const YAML::Node group = v[i];
    const std::string gp = Index(path, i);
    if (!group.IsSequence()) {
      return Error(group, gp,
                   std::string("expected a list of GPU indices, got ") + KindName(group));
    }
    if (group.size() == 0) return Error(group, gp, "empty NVLink group");
    std::vector<int> members;
    for (size_t j = 0; j < group.size(); ++j) {
      const std::string ip = Index(gp, j);
      int64_t gpu = 0;
      AICLOUD_RETURN_IF_ERROR(ExpectScalar(group[j], ip, "a GPU index"));
      if (!ParseInt(group[j].Scalar(), &gpu)) {
        return Error(group[j], ip, "not a GPU index: " + Quote(group[j].Scalar()));
      }
      if (gpu < 0 || gpu >= spec->count) {
        return Error(group[j], ip,
                     "GPU index " + std::to_string(gpu) + " out of range; the node has " +
                         std::to_string(spec->count) + " GPUs (0.." +
                         std::to_string(spec->count - 1) + ")");
      }
      if (used[gpu]) {
        return Error(group[j], ip,
                     "GPU " + std::to_string(gpu) + " is already in an NVLink group");
      }
      used[gpu] = true;
      members.push_back(static_cast<int>(gpu));
    }
    spec->groups.push_back(std::move(members));
  }
  return OkStatus();
}

Status Decoder::DecodeGpus(const YAML::Node& g, const std::string& path, GpuSpec* spec) const {
  AICLOUD_RETURN_IF_ERROR(ExpectMap(g, path));
  AICLOUD_RETURN_IF_ERROR(
      CheckFields(g, path, {"model", "count", "memory", "nvlink", "numa", "pcieSwitch"}));
  AICLOUD_RETURN_IF_ERROR(Require(g, path, "count"));
  int64_t count = 0;
  AICLOUD_RETURN_IF_ERROR(AsInt(g["count"], Join(path, "count"), 1, kMaxGpusPerNode, &count));
  spec->count = static_cast<int>(count);

  if (const YAML::Node v = g["memory"]; Present(v)) {
    const std::string p = Join(path, "memory");
    AICLOUD_RETURN_IF_ERROR(ExpectScalar(v, p, "a memory quantity"));
    StatusOr<int64_t> mib = ParseMemoryMib(v.Scalar());
    if (!mib.ok()) return Error(v, p, mib.status().message());
    spec->mem_mib = *mib;
  }

  std::string model;
  AICLOUD_RETURN_IF_ERROR(Require(g, path, "model"));
  const YAML::Node model_node = g["model"];
  AICLOUD_RETURN_IF_ERROR(AsString(model_node, Join(path, "model"), &model));
  const GpuModelSpec* known = FindGpuModel(model);
  if (known == nullptr && spec->mem_mib == 0) {
    return Error(model_node, Join(path, "model"),
                 "unknown GPU model " + Quote(model) +
                     "; use a catalog name or alias, or give gpus.memory for a model outside "
                     "the catalog");
  }
  if (known != nullptr && spec->mem_mib == 0) {
    spec->mem_mib = std::llround(known->memory_gib * 1024);
  }

  if (const YAML::Node v = g["nvlink"]; Present(v)) {
    AICLOUD_RETURN_IF_ERROR(DecodeNvLink(v, Join(path, "nvlink"), spec));
  } else if (known != nullptr && known->nvlink_domain_gpus > 0) {
    // Default to the reference system's wiring: consecutive GPUs in domains of the catalog's
    // size (all 8 on an HGX board; pairs for bridged PCIe cards).
    spec->nvlink = GpuSpec::NvLink::kGroups;
    for (int first = 0; first < spec->count; first += known->nvlink_domain_gpus) {
      std::vector<int> members;
      for (int i = first; i < std::min(spec->count, first + known->nvlink_domain_gpus); ++i) {
        members.push_back(i);
      }
      spec->groups.push_back(std::move(members));
    }
  }

  if (const YAML::Node v = g["numa"]; Present(v)) {
    const std::string p = Join(path, "numa");
    AICLOUD_RETURN_IF_ERROR(AsIntList(v, p, 0, 1023, &spec->numa));
    if (static_cast<int>(spec->numa.size()) != spec->count) {
      return Error(v, p, "has " + std::to_string(spec->numa.size()) +
                             " entries but count is " + std::to_string(spec->count));
    }
  } else {
    // Dual-socket servers hang half the GPUs off each socket.
    for (int i = 0; i < spec->count; ++i) {
      spec->numa.push_back(static_cast<int16_t>(i * 2 / spec->count));
    }
  }
  if (const YAML::Node v = g["pcieSwitch"]; Present(v)) {
    const std::string p = Join(path, "pcieSwitch");
    AICLOUD_RETURN_IF_ERROR(AsIntList(v, p, 0, 32767, &spec->pcie_switch));
    if (static_cast<int>(spec->pcie_switch.size()) != spec->count) {
      return Error(v, p, "has " + std::to_string(spec->pcie_switch.size()) +
                             " entries but count is " + std::to_string(spec->count));
    }
  } else {
    spec->pcie_switch.assign(spec->count, -1);
  }
  return OkStatus();
}

Status Decoder::DecodeNodeEntry(const YAML::Node& e, const std::string& path) {
  AICLOUD_RETURN_IF_ERROR(ExpectMap(e, path));
  AICLOUD_RETURN_IF_ERROR(CheckFields(e, path,
                                      {"name", "namePrefix", "replicas", "rack", "pool", "cpu",
                                       "memory", "leafSwitch", "labels", "taints",
                                       "unschedulable", "gpus"}));

  // Which names this entry produces.
  std::vector<std::string> names;
  const YAML::Node name = e["name"];
  const YAML::Node prefix = e["namePrefix"];
  const YAML::Node replicas = e["replicas"];
  if (Present(name)) {
    if (Present(prefix)) {
      return Error(prefix, Join(path, "namePrefix"), "give either name or namePrefix, not both");
    }
    if (Present(replicas)) {
      return Error(replicas, Join(path, "replicas"),
                   "needs namePrefix; a named entry is a single node");
    }
    names.emplace_back();
    AICLOUD_RETURN_IF_ERROR(AsName(name, Join(path, "name"), &names.back()));
  } else if (Present(prefix)) {
    std::string p;
    AICLOUD_RETURN_IF_ERROR(AsString(prefix, Join(path, "namePrefix"), &p));
    // The prefix may end in '-' or '.', but "prefix0" must itself be a valid name.
    if (!IsValidName(p + "0")) {
      return Error(prefix, Join(path, "namePrefix"),
                   "invalid prefix " + Quote(p) +
                       ": use letters, digits, '-', '_' and '.', starting with a letter or digit");
    }
    if (!Present(replicas)) {
      return Error(e, Join(path, "replicas"), "required with namePrefix");
    }
    int64_t n = 0;
    AICLOUD_RETURN_IF_ERROR(AsInt(replicas, Join(path, "replicas"), 1, kMaxReplicas, &n));
    for (int64_t i = 0; i < n; ++i) names.push_back(p + std::to_string(i));
  } else {
    return Error(e, Join(path, "name"), "required field is missing (or give namePrefix)");
  }

  Node tmpl;
  int32_t rack = -1;
  if (const YAML::Node v = e["rack"]; Present(v)) {
    std::string r;
    AICLOUD_RETURN_IF_ERROR(AsString(v, Join(path, "rack"), &r));
    rack = cluster_.FindRack(r);
    if (rack < 0) return Error(v, Join(path, "rack"), "unknown rack " + Quote(r));
    tmpl.rack = rack;
    tmpl.leaf_switch = cluster_.racks()[rack].leaf_switch;
  }
  if (const YAML::Node v = e["leafSwitch"]; Present(v)) {
    std::string leaf;
    AICLOUD_RETURN_IF_ERROR(AsName(v, Join(path, "leafSwitch"), &leaf));
    tmpl.leaf_switch = InternLeafSwitch(leaf);
  }
  if (const YAML::Node v = e["pool"]; Present(v)) {
    AICLOUD_RETURN_IF_ERROR(AsString(v, Join(path, "pool"), &tmpl.pool));
  }

  AICLOUD_RETURN_IF_ERROR(Require(e, path, "cpu"));
  const YAML::Node cpu_node = e["cpu"];
  AICLOUD_RETURN_IF_ERROR(ExpectScalar(cpu_node, Join(path, "cpu"), "a CPU quantity"));
  StatusOr<int64_t> cpu = ParseCpuMilli(cpu_node.Scalar());
  if (!cpu.ok()) return Error(cpu_node, Join(path, "cpu"), cpu.status().message());
  tmpl.cpu_milli = *cpu;

  AICLOUD_RETURN_IF_ERROR(Require(e, path, "memory"));
  const YAML::Node mem_node = e["memory"];
  AICLOUD_RETURN_IF_ERROR(ExpectScalar(mem_node, Join(path, "memory"), "a memory quantity"));
  StatusOr<int64_t> mem = ParseMemoryMib(mem_node.Scalar());
  if (!mem.ok()) return Error(mem_node, Join(path, "memory"), mem.status().message());
  tmpl.mem_mib = *mem;

  if (const YAML::Node v = e["labels"]; Present(v)) {
    AICLOUD_RETURN_IF_ERROR(DecodeLabels(v, Join(path, "labels"), &tmpl.labels));
  }
  if (const YAML::Node v = e["taints"]; Present(v)) {
    AICLOUD_RETURN_IF_ERROR(DecodeTaints(v, Join(path, "taints"), &tmpl.taints));
  }
  if (const YAML::Node v = e["unschedulable"]; Present(v)) {
    AICLOUD_RETURN_IF_ERROR(AsBool(v, Join(path, "unschedulable"), &tmpl.unschedulable));
  }

  GpuSpec gpus;
  const bool rack_nvlink = rack >= 0 && rack_nvlink_[rack];
  if (const YAML::Node v = e["gpus"]; Present(v)) {
    const std::string gp = Join(path, "gpus");
    AICLOUD_RETURN_IF_ERROR(DecodeGpus(v, gp, &gpus));
    const std::string model = v["model"].Scalar();
    const GpuModelSpec* known = FindGpuModel(model);
    tmpl.model = cluster_.InternModel(known != nullptr ? known->name : model);
    // In a rack-scale NVLink domain the wiring is the rack's, not the node's; a node-level
    // `none` or partial grouping would contradict the hardware, so only `all` may be restated.
    if (rack_nvlink && gpus.nvlink_given && gpus.nvlink != GpuSpec::NvLink::kAll) {
      return ErrorAtLine(gpus.line, Join(gp, "nvlink"),
                         "rack " + Quote(cluster_.racks()[rack].name) +
                             " is one NVLink domain (nvlinkDomain: true); leave nvlink out or "
                             "set it to all");
    }
    tmpl.gpus.resize(gpus.count);
    for (int i = 0; i < gpus.count; ++i) {
      Gpu& g = tmpl.gpus[i];
      g.mem_mib = gpus.mem_mib;
      g.numa = gpus.numa[i];
      g.pcie_switch = gpus.pcie_switch[i];
    }
  }

  for (std::string& n : names) {
    if (auto [it, added] = node_lines_.emplace(n, LineOf(e)); !added) {
      const YAML::Node at = Present(name) ? name : prefix;
      return Error(at, Join(path, Present(name) ? "name" : "namePrefix"),
                   "duplicate node name " + Quote(n) + " (first defined at line " +
                       std::to_string(it->second) + ")");
    }
    Node node = tmpl;
    node.name = std::move(n);
    // NVLink domain ids are cluster-wide, so each replica gets fresh ones (unless the rack is
    // itself the domain, in which case they all share the rack's).
    if (!node.gpus.empty()) {
      if (rack_nvlink) {
        if (rack_domain_[rack] < 0) rack_domain_[rack] = next_domain_++;
        for (Gpu& g : node.gpus) g.nvlink_domain = rack_domain_[rack];
      } else if (gpus.nvlink == GpuSpec::NvLink::kAll) {
        const int32_t d = next_domain_++;
        for (Gpu& g : node.gpus) g.nvlink_domain = d;
      } else if (gpus.nvlink == GpuSpec::NvLink::kGroups) {
        for (const std::vector<int>& group : gpus.groups) {
          const int32_t d = next_domain_++;
          for (int i : group) node.gpus[i].nvlink_domain = d;
        }
      }
    }
    cluster_.AddNode(std::move(node));
  }
  return OkStatus();
}

}  // namespace

StatusOr<int64_t> ParseCpuMilli(std::string_view text) {
  const std::string hint = ": want cores (\"96\", \"0.5\") or millicores (\"96000m\")";
  if (!text.empty() && text.front() == '-') {
    return InvalidArgumentError("must be positive, got " + Quote(text));
  }
  int64_t milli = 0;
  if (!text.empty() && text.back() == 'm') {
    std::string_view digits = text.substr(0, text.size() - 1);
    if (!ParseFixed(digits, 0, &milli) || digits.find('.') != std::string_view::npos) {
      return InvalidArgumentError("not a CPU quantity " + Quote(text) + hint);
    }
  } else if (!ParseFixed(text, 3, &milli)) {
    int64_t ignored = 0;
    if (ParseFixed(text, 12, &ignored)) {
      return InvalidArgumentError("finer than a millicore: " + Quote(text) +
                                  "; use at most 3 decimal places");
    }
    return InvalidArgumentError("not a CPU quantity " + Quote(text) + hint);
  }
  if (milli <= 0) return InvalidArgumentError("must be positive, got " + Quote(text));
  return milli;
}

StatusOr<int64_t> ParseMemoryMib(std::string_view text) {
  static constexpr std::pair<std::string_view, int> kUnits[] = {
      {"Ki", 10}, {"Mi", 20}, {"Gi", 30}, {"Ti", 40}, {"Pi", 50}};
  const std::string hint =
      ": want a number with a binary suffix Ki, Mi, Gi, Ti or Pi, e.g. \"512Gi\"";
  if (!text.empty() && text.front() == '-') {
    return InvalidArgumentError("must be positive, got " + Quote(text));
  }
  int shift = -1;
  std::string_view number;
  for (const auto& [suffix, bits] : kUnits) {
    if (text.size() > suffix.size() && text.substr(text.size() - suffix.size()) == suffix) {
      shift = bits;
      number = text.substr(0, text.size() - suffix.size());
    }
  }
  if (shift < 0) return InvalidArgumentError("bad memory quantity " + Quote(text) + hint);
  constexpr int64_t kScale = 1000000;  // six decimal places
  int64_t fixed = 0;
  if (!ParseFixed(number, 6, &fixed)) {
    return InvalidArgumentError("bad memory quantity " + Quote(text) + hint);
  }
  // Exact floor of fixed * 2^shift / 10^6 / 2^20, split into whole and fraction so no step
  // overflows 64 bits (whole < 10^12, fraction < 10^6, shifts <= 30).
  constexpr int64_t kMaxMib = int64_t{1} << 40;  // 1 EiB: anything above is a typo
  const int64_t whole = fixed / kScale;
  const int64_t frac = fixed % kScale;
  int64_t mib = 0;
  if (shift >= 20) {
    const int k = shift - 20;
    if (whole > (kMaxMib >> k)) return InvalidArgumentError("implausibly large: " + Quote(text));
    mib = (whole << k) + ((frac << k) / kScale);
  } else {
    mib = ((whole << shift) + ((frac << shift) / kScale)) >> 20;
  }
  if (mib < 1) return InvalidArgumentError("must be at least 1Mi, got " + Quote(text));
  if (mib > kMaxMib) return InvalidArgumentError("implausibly large: " + Quote(text));
  return mib;
}

StatusOr<Cluster> ParseInventory(std::string_view yaml, const std::string& name_for_errors) {
  // Exceptions stop here: yaml-cpp reports syntax errors (and a few misuse errors) by throwing.
  try {
    return Decoder(name_for_errors).Decode(yaml);
  } catch (const YAML::Exception& e) {
    const int line = e.mark.line >= 0 ? e.mark.line + 1 : 1;
    return InvalidArgumentError(name_for_errors + ":" + std::to_string(line) + ": yaml: " +
                                e.msg);
  } catch (const std::exception& e) {
    return InternalError(name_for_errors + ":1: inventory: " + e.what());
  }
}

StatusOr<Cluster> LoadInventoryFile(const std::string& path) {
  std::error_code ec;
  const auto status = std::filesystem::status(path, ec);
  if (ec || !std::filesystem::exists(status)) {
    return NotFoundError(path + ": cannot open: " +
                         (ec ? ec.message() : std::string("no such file")));
  }
  if (std::filesystem::is_directory(status)) {
    return InvalidArgumentError(path + ": is a directory, not an inventory file");
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFoundError(path + ": cannot open: " + std::strerror(errno));
  if (std::filesystem::is_regular_file(status) &&
      std::filesystem::file_size(path, ec) > kMaxFileBytes) {
    return InvalidArgumentError(path + ": larger than 64 MiB; not an inventory file");
  }
  std::ostringstream buf;
  buf << in.rdbuf();
  if (in.bad()) return InternalError(path + ": read failed: " + std::strerror(errno));
  return ParseInventory(buf.str(), path);
}

}  // namespace aicloud::cluster
