// HeaderMap: the header fields of a received message (Request, ClientResponse). Names are
// lower-cased and a repeated field's values are joined by ", " (RFC 9110 5.3), so a lookup by a
// lower-case name finds the whole value.
//
//   HeaderMap h;
//   h.Add("Content-Type", "application/json");   // kept as "content-type"
//   h.Add("Accept", "a");  h.Add("accept", "b");  // "accept": "a, b"
//   h.Get("content-type");                        // "application/json"; "" when absent
//   for (const auto& [name, value] : h) ...       // in arrival order
//
// A flat vector searched in order rather than a tree: a message carries a handful of fields,
// which a scan finds sooner than a tree walk, and clear() keeps the fields' strings, so the next
// request on a kept-alive connection refills them without allocating. Unlike std::map's, references
// and iterators are invalidated by Add and operator[]. Thread-compatible.
#pragma once

#include <cstddef>
#include <initializer_list>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace aicloud::http {

class HeaderMap {
 public:
  using value_type = std::pair<std::string, std::string>;
  using iterator = std::vector<value_type>::iterator;
  using const_iterator = std::vector<value_type>::const_iterator;

  HeaderMap() = default;
  // Fields as given; a repeated name is joined as Add joins it. Names should be lower-case to be
  // found (a literal in a test, say); Add lower-cases, this does too.
  HeaderMap(std::initializer_list<std::pair<std::string_view, std::string_view>> fields);
  // Copies hold the fields only, not the spare storage of cleared ones.
  HeaderMap(const HeaderMap& other);
  HeaderMap& operator=(const HeaderMap& other);
  HeaderMap(HeaderMap&& other) noexcept;
  HeaderMap& operator=(HeaderMap&& other) noexcept;

  // A field as it arrived: the name is lower-cased; a name already present gets ", " and the
  // value appended. false, and nothing stored, when `name` is new and the map already holds
  // kMaxFields fields: readers answer such a message as a header over its limit. (A search in
  // order makes n fields cost n^2/2 comparisons; the cap keeps that small.)
  bool Add(std::string_view name, std::string_view value);

  // REQUIRES: lower_name is lower-case (names are stored so).
  const_iterator find(std::string_view lower_name) const;
  iterator find(std::string_view lower_name);
  bool contains(std::string_view lower_name) const { return find(lower_name) != end(); }
  size_t count(std::string_view lower_name) const { return contains(lower_name) ? 1 : 0; }
  // The value, "" when absent; valid until the map changes.
  std::string_view Get(std::string_view lower_name) const;
  // As std::map's: the value of `lower_name`, added empty when absent. REQUIRES: lower-case.
  std::string& operator[](std::string_view lower_name);

  iterator begin() { return fields_.begin(); }
  iterator end() { return fields_.begin() + static_cast<std::ptrdiff_t>(size_); }
  const_iterator begin() const { return fields_.begin(); }
  const_iterator end() const { return fields_.begin() + static_cast<std::ptrdiff_t>(size_); }
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }

  // Forgets every field. Their strings stay for the next message unless there were more than
  // kKeptFields of them or they hold more than kKeptBytes (a large head does not pin its memory
  // on an idle connection).
  void clear();

  // Same fields with the same values, in any order.
  friend bool operator==(const HeaderMap& a, const HeaderMap& b);

  static constexpr size_t kMaxFields = 256;
  static constexpr size_t kKeptFields = 32;
  static constexpr size_t kKeptBytes = 4096;

 private:
  // The next unused field, its strings emptied but their storage kept.
  value_type& Spare();

  std::vector<value_type> fields_;  // [0, size_) in use; the rest are spares
  size_t size_ = 0;
};

}  // namespace aicloud::http
