// CsvTable: a small reader for the header-first, comma-separated trace files the project loads
// (openb node and pod lists). Every error names `file:line: column: what is wrong`.
//
//   StatusOr<CsvTable> t = CsvTable::ReadFile("nodes.csv");
//   for (const CsvRow& row : t->rows()) {
//     StatusOr<int64_t> gpus = row.GetInt("gpu");
//   }
//
// Quoted fields are not supported: the traces have none, and a quote is reported as an error
// rather than misread.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/status.h"

namespace aicloud {

class CsvTable;

// One data row. Valid while its table lives.
class CsvRow {
 public:
  int line() const { return line_; }
  bool Has(std::string_view column) const;
  // Raw text of a column; empty when the column is absent from the file.
  std::string_view Get(std::string_view column) const;
  // Integer value; an error naming file, line and column when missing or malformed.
  StatusOr<int64_t> GetInt(std::string_view column) const;
  // Like GetInt, but an absent column or empty cell yields `fallback`.
  StatusOr<int64_t> GetIntOr(std::string_view column, int64_t fallback) const;
  // Error text in the project's format for this row and column.
  Status Error(std::string_view column, std::string_view what) const;

 private:
  friend class CsvTable;
  const CsvTable* table_ = nullptr;
  int line_ = 0;
  std::vector<std::string> cells_;
};

class CsvTable {
 public:
  static StatusOr<CsvTable> ReadFile(const std::string& path);
  // `name` is used in error messages in place of a path.
  static StatusOr<CsvTable> Parse(std::string_view text, std::string name);

  const std::string& name() const { return name_; }
  const std::vector<std::string>& columns() const { return columns_; }
  const std::vector<CsvRow>& rows() const { return rows_; }
  bool HasColumn(std::string_view c) const { return index_.count(std::string(c)) > 0; }
  // Fails unless every named column is in the header.
  Status RequireColumns(std::initializer_list<std::string_view> names) const;

  CsvTable(CsvTable&& other) noexcept;
  CsvTable& operator=(CsvTable&& other) noexcept;
  CsvTable(const CsvTable&) = delete;
  CsvTable& operator=(const CsvTable&) = delete;

 private:
  CsvTable() = default;
  friend class CsvRow;
  int ColumnIndex(std::string_view c) const;

  std::string name_;
  std::vector<std::string> columns_;
  std::unordered_map<std::string, int> index_;
  std::vector<CsvRow> rows_;
};

}  // namespace aicloud
