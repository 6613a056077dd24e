#include "core/csv.h"

#include <gtest/gtest.h>

namespace aicloud {
namespace {

TEST(CsvTest, ParsesHeaderAndRowsWithLineNumbers) {
  auto t = CsvTable::Parse("a,b\n1,x\n\n2,y\r\n", "t.csv");
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  ASSERT_EQ(t->rows().size(), 2u);
  EXPECT_EQ(t->rows()[0].line(), 2);
  EXPECT_EQ(t->rows()[1].line(), 4);
  EXPECT_EQ(*t->rows()[1].GetInt("a"), 2);
  EXPECT_EQ(t->rows()[1].Get("b"), "y");
}

TEST(CsvTest, ErrorsNameFileLineAndColumn) {
  struct Case {
    const char* text;
    const char* want;
  } cases[] = {
      {"", "t.csv: empty file"},
      {"a,,c\n", "t.csv:1: column 2 of the header has no name"},
      {"a,a\n", "t.csv:1: a: column named twice"},
      {"a,b\n1\n", "t.csv:2: expected 2 fields, found 1"},
      {"a,b\n\"1\",2\n", "t.csv:2: quoted fields are not supported"},
  };
  for (const Case& c : cases) {
    auto t = CsvTable::Parse(c.text, "t.csv");
    ASSERT_FALSE(t.ok()) << c.text;
    EXPECT_NE(t.status().message().find(c.want), std::string::npos)
        << t.status().message() << " vs " << c.want;
  }
}

TEST(CsvTest, GetIntReportsBadCells) {
  auto t = CsvTable::Parse("n,gpu\nx,abc\ny,\nz,99999999999999999999\n", "t.csv");
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->rows()[0].GetInt("gpu").status().message(), "t.csv:2: gpu: 'abc' is not an integer");
  EXPECT_EQ(t->rows()[1].GetInt("gpu").status().message(), "t.csv:3: gpu: empty, expected an integer");
  EXPECT_NE(t->rows()[2].GetInt("gpu").status().message().find("out of range"), std::string::npos);
  EXPECT_EQ(*t->rows()[1].GetIntOr("gpu", 5), 5);
  EXPECT_EQ(t->rows()[0].GetInt("nope").status().message(), "t.csv:2: nope: column missing");
  EXPECT_FALSE(t->RequireColumns({"n", "model"}).ok());
}

TEST(CsvTest, MissingFile) {
  auto t = CsvTable::ReadFile("/nonexistent/x.csv");
  EXPECT_EQ(t.status().code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace aicloud
