#include "gateway/usage.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

namespace aicloud::gateway {
namespace {

using nlohmann::json;

UsageRecord Sample() {
  UsageRecord r;
  r.request_id = "gw-1-42";
  r.unix_ms = 1'763'800'000'123;
  r.key_id = "k1";
  r.tenant = "acme";
  r.team = "search";
  r.model = "chat-lora";
  r.adapter = "chat-lora";
  r.deployment = "chat";
  r.replica = "chat-0";
  r.endpoint = "chat/completions";
  r.stream = true;
  r.status = 200;
  r.prompt_tokens = 12;
  r.completion_tokens = 9;
  r.usage_reported = true;
  r.cost = 2.5e-06;
  r.latency_s = 0.125;
  r.ttft_s = 0.03125;
  r.held_s = 3;
  r.attempts = 2;
  return r;
}

std::string Line(const UsageRecord& r) {
  std::string s;
  r.AppendJson(&s);
  return s;
}

TEST(UsageRecord, AppendJsonWritesExactlyWhatToJsonDumps) {
  UsageRecord r = Sample();
  EXPECT_EQ(Line(r), r.ToJson().dump());
  r.cost = 0.0001;  // where shortest-form printing would write 1e-04
  EXPECT_EQ(Line(r), r.ToJson().dump());

  // Optional error, every escape, zero and integral doubles, large and negative integers.
  r.error = "upstream said \"no\"\\ twice\n\tthen \x01 and \x1f; ünïcode stays";
  r.cost = 0;
  r.latency_s = 100000;
  r.ttft_s = 1e-300;
  r.held_s = 123456789.5;
  r.unix_ms = -7;
  r.stream = false;
  r.usage_reported = false;
  const std::string line = Line(r);
  EXPECT_EQ(line, r.ToJson().dump());
  EXPECT_NE(line.find(R"(\"no\"\\ twice\n\tthen \u0001 and \u001f)"), std::string::npos) << line;
  EXPECT_EQ(line.find('\n'), std::string::npos) << "one record, one line";

  // Keys in the order ToJson().dump() writes them, so old and new lines read alike.
  std::vector<std::string> keys;
  const json expected = r.ToJson();
  for (auto& [k, v] : expected.items()) keys.push_back(k);
  for (size_t i = 1; i < keys.size(); ++i) {
    EXPECT_LT(line.find("\"" + keys[i - 1] + "\":"), line.find("\"" + keys[i] + "\":")) << keys[i];
  }
}

TEST(UsageRecord, NonFiniteDoublesAreNull) {
  UsageRecord r = Sample();
  r.cost = std::numeric_limits<double>::quiet_NaN();
  r.latency_s = std::numeric_limits<double>::infinity();
  json j = json::parse(Line(r));
  EXPECT_TRUE(j["cost"].is_null());
  EXPECT_TRUE(j["latency_s"].is_null());
}

TEST(LogUsageSink, WritesEveryRecordAsAJsonLineAndDropsPastTheQueueLimit) {
  char* buf = nullptr;
  size_t len = 0;
  std::FILE* out = open_memstream(&buf, &len);
  ASSERT_NE(out, nullptr);
  uint64_t dropped = 0;
  {
    LogUsageSink sink(out, /*max_queue=*/5);
    for (int i = 0; i < 8; ++i) {
      UsageRecord r = Sample();
      r.request_id = "gw-" + std::to_string(i);
      sink.Record(std::move(r));
    }
    dropped = sink.dropped();
  }  // the destructor writes what is queued
  std::fclose(out);
  std::string text(buf, len);
  std::free(buf);
  // 8 records, at most 5 waiting: 3 dropped, unless the writer drained the queue in between.
  EXPECT_GE(dropped, 1u);
  std::istringstream lines(text);
  std::string line;
  int n = 0, last_id = -1;
  while (std::getline(lines, line)) {
    ASSERT_EQ(line.rfind("usage ", 0), 0u) << line;
    json j = json::parse(line.substr(6));
    const int id = std::stoi(j["request_id"].get<std::string>().substr(3));
    EXPECT_GT(id, last_id) << "in the order recorded";
    last_id = id;
    EXPECT_EQ(j["completion_tokens"], 9);
    ++n;
  }
  EXPECT_EQ(static_cast<uint64_t>(n) + dropped, 8u) << "every record written or counted as dropped";
  EXPECT_GE(n, 5);
}

}  // namespace
}  // namespace aicloud::gateway
