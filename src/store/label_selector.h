// LabelSelector: Kubernetes label selectors, parsed once and matched against an object's labels.
// Both Store backends filter List results with it, so a selector means the same thing everywhere.
//
//   StatusOr<LabelSelector> sel = LabelSelector::Parse("team=nlp,tier!=batch,gpu,!spot");
//   if (!sel.ok()) return sel.status();  // INVALID_ARGUMENT naming the bad requirement
//   if (sel->Matches(object["metadata"]["labels"])) { ... }
//
// Grammar (as `kubectl get -l`): requirements separated by commas, all of which must hold.
//   key=value, key==value   the label is present with that value
//   key!=value              the label is absent or has another value
//   key                     the label is present (any value)
//   !key                    the label is absent
//   key in (v1,v2)          the label is present with one of the values
//   key notin (v1,v2)       the label is absent or has none of the values
// Keys are `[prefix/]name`: name 1-63 characters of [A-Za-z0-9-_.] that start and end with an
// alphanumeric, prefix a DNS subdomain of at most 253 characters. Values follow the name rule
// and may be empty. Whitespace around tokens is ignored. The empty selector matches everything.
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace aicloud::store {

// Immutable after Parse; thread-compatible (const methods may be called concurrently).
class LabelSelector {
 public:
  enum class Op { kEquals, kNotEquals, kExists, kNotExists, kIn, kNotIn };
  struct Requirement {
    std::string key;
    Op op = Op::kExists;
    std::vector<std::string> values;  // one for (Not)Equals, one or more for (Not)In
  };

  // The empty selector: matches every object.
  LabelSelector() = default;

  static StatusOr<LabelSelector> Parse(std::string_view text);

  bool empty() const { return requirements_.empty(); }
  const std::vector<Requirement>& requirements() const { return requirements_; }

  bool Matches(const std::map<std::string, std::string>& labels) const;
  // `labels` is metadata.labels: an object of strings, or null/absent (no labels). Non-string
  // values never equal a selector value (the store rejects them on write anyway).
  bool Matches(const nlohmann::json& labels) const;

  // Canonical text form, e.g. "gpu,team=nlp"; Parse(ToString()) gives an equal selector.
  std::string ToString() const;

 private:
  std::vector<Requirement> requirements_;
};

// Label key and value rules, shared with object validation on write. Each returns the problem
// ("must be at most 63 characters", ...) or an empty string when valid.
std::string LabelKeyProblem(std::string_view key);
std::string LabelValueProblem(std::string_view value);

}  // namespace aicloud::store
