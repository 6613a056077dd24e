#include "core/csv.h"

#include <charconv>
#include <fstream>
#include <sstream>

namespace aicloud {
namespace {

std::vector<std::string> SplitLine(std::string_view line) {
  std::vector<std::string> out;
  size_t start = 0;
  while (true) {
    size_t comma = line.find(',', start);
    if (comma == std::string_view::npos) {
      out.emplace_back(line.substr(start));
      break;
    }
    out.emplace_back(line.substr(start, comma - start));
    start = comma + 1;
  }
  for (std::string& cell : out) {
    while (!cell.empty() && (cell.back() == ' ' || cell.back() == '\t')) cell.pop_back();
    size_t lead = cell.find_first_not_of(" \t");
    cell.erase(0, lead == std::string::npos ? cell.size() : lead);
  }
  return out;
}

}  // namespace

CsvTable::CsvTable(CsvTable&& other) noexcept
    : name_(std::move(other.name_)),
      columns_(std::move(other.columns_)),
      index_(std::move(other.index_)),
      rows_(std::move(other.rows_)) {
  for (CsvRow& r : rows_) r.table_ = this;
}

CsvTable& CsvTable::operator=(CsvTable&& other) noexcept {
  name_ = std::move(other.name_);
  columns_ = std::move(other.columns_);
  index_ = std::move(other.index_);
  rows_ = std::move(other.rows_);
  for (CsvRow& r : rows_) r.table_ = this;
  return *this;
}

StatusOr<CsvTable> CsvTable::ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFoundError(path + ": cannot open file");
  std::stringstream ss;
  ss << in.rdbuf();
  return Parse(ss.str(), path);
}

StatusOr<CsvTable> CsvTable::Parse(std::string_view text, std::string name) {
  CsvTable t;
  t.name_ = std::move(name);
  int line_no = 0;
  bool have_header = false;
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t nl = text.find('\n', pos);
    std::string_view line =
        text.substr(pos, nl == std::string_view::npos ? std::string_view::npos : nl - pos);
    pos = (nl == std::string_view::npos) ? text.size() + 1 : nl + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.find_first_not_of(" \t") == std::string_view::npos) continue;
    if (line.find('"') != std::string_view::npos) {
      return InvalidArgumentError(t.name_ + ":" + std::to_string(line_no) +
                                  ": quoted fields are not supported");
    }
    std::vector<std::string> cells = SplitLine(line);
    if (!have_header) {
      for (size_t i = 0; i < cells.size(); ++i) {
        if (cells[i].empty()) {
          return InvalidArgumentError(t.name_ + ":" + std::to_string(line_no) + ": column " +
                                      std::to_string(i + 1) + " of the header has no name");
        }
        if (!t.index_.emplace(cells[i], static_cast<int>(i)).second) {
          return InvalidArgumentError(t.name_ + ":" + std::to_string(line_no) + ": " + cells[i] +
                                      ": column named twice in the header");
        }
      }
      t.columns_ = std::move(cells);
      have_header = true;
      continue;
    }
    if (cells.size() != t.columns_.size()) {
      return InvalidArgumentError(t.name_ + ":" + std::to_string(line_no) + ": expected " +
                                  std::to_string(t.columns_.size()) + " fields, found " +
                                  std::to_string(cells.size()));
    }
    CsvRow row;
    row.table_ = &t;
    row.line_ = line_no;
    row.cells_ = std::move(cells);
    t.rows_.push_back(std::move(row));
  }
  if (!have_header) return InvalidArgumentError(t.name_ + ": empty file, expected a header line");
  for (CsvRow& r : t.rows_) r.table_ = &t;
  return t;
}

Status CsvTable::RequireColumns(std::initializer_list<std::string_view> names) const {
  for (std::string_view n : names) {
    if (!HasColumn(n)) {
      return InvalidArgumentError(name_ + ":1: " + std::string(n) + ": required column missing");
    }
  }
  return OkStatus();
}

int CsvTable::ColumnIndex(std::string_view c) const {
  auto it = index_.find(std::string(c));
  return it == index_.end() ? -1 : it->second;
}

bool CsvRow::Has(std::string_view column) const { return table_->ColumnIndex(column) >= 0; }

std::string_view CsvRow::Get(std::string_view column) const {
  int i = table_->ColumnIndex(column);
  return i < 0 ? std::string_view() : std::string_view(cells_[i]);
}

Status CsvRow::Error(std::string_view column, std::string_view what) const {
  return InvalidArgumentError(table_->name() + ":" + std::to_string(line_) + ": " +
                              std::string(column) + ": " + std::string(what));
}

StatusOr<int64_t> CsvRow::GetInt(std::string_view column) const {
  if (!Has(column)) return Error(column, "column missing");
  std::string_view s = Get(column);
  if (s.empty()) return Error(column, "empty, expected an integer");
  int64_t v = 0;
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec == std::errc::result_out_of_range) return Error(column, "'" + std::string(s) + "' is out of range");
  if (ec != std::errc() || ptr != s.data() + s.size()) {
    return Error(column, "'" + std::string(s) + "' is not an integer");
  }
  return v;
}

StatusOr<int64_t> CsvRow::GetIntOr(std::string_view column, int64_t fallback) const {
  if (!Has(column) || Get(column).empty()) return fallback;
  return GetInt(column);
}

}  // namespace aicloud
