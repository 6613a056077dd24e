#include "http/header_map.h"

#include <algorithm>

namespace aicloud::http {
namespace {

// ASCII only: std::tolower consults the locale on every call.
char Lower(char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c + ('a' - 'A')) : c; }

// `name` lower-cased equals `lower` (REQUIRES: same length).
bool EqualsLowered(std::string_view name, std::string_view lower) {
  for (size_t i = 0; i < name.size(); ++i) {
    if (Lower(name[i]) != lower[i]) return false;
  }
  return true;
}

}  // namespace

HeaderMap::HeaderMap(std::initializer_list<std::pair<std::string_view, std::string_view>> fields) {
  fields_.reserve(fields.size());
  for (const auto& [name, value] : fields) Add(name, value);
}

HeaderMap::HeaderMap(const HeaderMap& other) : fields_(other.begin(), other.end()), size_(other.size_) {}

HeaderMap& HeaderMap::operator=(const HeaderMap& other) {
  if (this != &other) {
    fields_.assign(other.begin(), other.end());
    size_ = other.size_;
  }
  return *this;
}

HeaderMap::HeaderMap(HeaderMap&& other) noexcept
    : fields_(std::move(other.fields_)), size_(std::exchange(other.size_, 0)) {
  other.fields_.clear();
}

HeaderMap& HeaderMap::operator=(HeaderMap&& other) noexcept {
  if (this != &other) {
    fields_ = std::move(other.fields_);
    size_ = std::exchange(other.size_, 0);
    other.fields_.clear();
  }
  return *this;
}

HeaderMap::value_type& HeaderMap::Spare() {
  if (size_ == fields_.size()) {
    if (fields_.capacity() == fields_.size()) fields_.reserve(std::max<size_t>(8, 2 * fields_.size()));
    fields_.emplace_back();
  }
  value_type& f = fields_[size_];
  f.first.clear();
  f.second.clear();
  return f;
}

bool HeaderMap::Add(std::string_view name, std::string_view value) {
  // A repeat is looked for before anything is copied: lengths first, then the letters.
  for (size_t i = 0; i < size_; ++i) {
    const std::string& have = fields_[i].first;
    if (have.size() == name.size() && EqualsLowered(name, have)) {
      fields_[i].second.append(", ").append(value);
      return true;
    }
  }
  if (size_ >= kMaxFields) return false;
  // Into the spare field's kept strings: a new field costs no allocation once they are grown.
  value_type& spare = Spare();
  spare.first.resize(name.size());
  for (size_t i = 0; i < name.size(); ++i) spare.first[i] = Lower(name[i]);
  spare.second.assign(value);
  ++size_;
  return true;
}

HeaderMap::const_iterator HeaderMap::find(std::string_view lower_name) const {
  return std::find_if(begin(), end(), [&](const value_type& f) { return f.first == lower_name; });
}

HeaderMap::iterator HeaderMap::find(std::string_view lower_name) {
  return std::find_if(begin(), end(), [&](const value_type& f) { return f.first == lower_name; });
}

std::string_view HeaderMap::Get(std::string_view lower_name) const {
  const_iterator it = find(lower_name);
  return it == end() ? std::string_view() : std::string_view(it->second);
}

std::string& HeaderMap::operator[](std::string_view lower_name) {
  iterator it = find(lower_name);
  if (it != end()) return it->second;
  value_type& spare = Spare();
  spare.first.assign(lower_name);
  ++size_;
  return spare.second;
}

void HeaderMap::clear() {
  size_t bytes = 0;
  for (const value_type& f : fields_) bytes += f.first.capacity() + f.second.capacity();
  if (fields_.size() > kKeptFields || bytes > kKeptBytes) std::vector<value_type>().swap(fields_);
  size_ = 0;
}

bool operator==(const HeaderMap& a, const HeaderMap& b) {
  if (a.size_ != b.size_) return false;
  for (const auto& [name, value] : a) {
    auto it = b.find(name);
    if (it == b.end() || it->second != value) return false;
  }
  return true;
}

}  // namespace aicloud::http
