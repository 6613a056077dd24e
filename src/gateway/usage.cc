#include "gateway/usage.h"

#include <sys/resource.h>
#include <unistd.h>

#include <charconv>

#include "core/thread_name.h"
#include "gateway/json_text.h"

namespace aicloud::gateway {
namespace {

void AppendInt(std::string* out, int64_t v) {
  char buf[24];
  auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), v);
  out->append(buf, end);
}

}  // namespace

nlohmann::json UsageRecord::ToJson() const {
  nlohmann::json j = {{"request_id", request_id}, {"unix_ms", unix_ms},   {"key_id", key_id},
                      {"tenant", tenant},         {"team", team},         {"model", model},
                      {"adapter", adapter},       {"deployment", deployment}, {"replica", replica},
                      {"endpoint", endpoint},     {"stream", stream},     {"status", status},
                      {"prompt_tokens", prompt_tokens}, {"completion_tokens", completion_tokens},
                      {"usage_reported", usage_reported}, {"cost", cost}, {"latency_s", latency_s},
                      {"ttft_s", ttft_s},         {"held_s", held_s},     {"attempts", attempts}};
  if (!error.empty()) j["error"] = error;
  return j;
}

void UsageRecord::AppendJson(std::string* out) const {
  // Keys in nlohmann's (sorted) order, so a line reads as ToJson().dump() does (see the header
  // for where the bytes may differ). Each key is written with the comma before it and its colon.
  out->append(R"({"adapter":)"), AppendJsonString(out, adapter);
  out->append(R"(,"attempts":)"), AppendInt(out, attempts);
  out->append(R"(,"completion_tokens":)"), AppendInt(out, completion_tokens);
  out->append(R"(,"cost":)"), AppendJsonDouble(out, cost);
  out->append(R"(,"deployment":)"), AppendJsonString(out, deployment);
  out->append(R"(,"endpoint":)"), AppendJsonString(out, endpoint);
  if (!error.empty()) out->append(R"(,"error":)"), AppendJsonString(out, error);
  out->append(R"(,"held_s":)"), AppendJsonDouble(out, held_s);
  out->append(R"(,"key_id":)"), AppendJsonString(out, key_id);
  out->append(R"(,"latency_s":)"), AppendJsonDouble(out, latency_s);
  out->append(R"(,"model":)"), AppendJsonString(out, model);
  out->append(R"(,"prompt_tokens":)"), AppendInt(out, prompt_tokens);
  out->append(R"(,"replica":)"), AppendJsonString(out, replica);
  out->append(R"(,"request_id":)"), AppendJsonString(out, request_id);
  out->append(R"(,"status":)"), AppendInt(out, status);
  out->append(stream ? R"(,"stream":true)" : R"(,"stream":false)");
  out->append(R"(,"team":)"), AppendJsonString(out, team);
  out->append(R"(,"tenant":)"), AppendJsonString(out, tenant);
  out->append(R"(,"ttft_s":)"), AppendJsonDouble(out, ttft_s);
  out->append(R"(,"unix_ms":)"), AppendInt(out, unix_ms);
  out->append(usage_reported ? R"(,"usage_reported":true})" : R"(,"usage_reported":false})");
}

LogUsageSink::LogUsageSink(std::FILE* out, size_t max_queue)
    : out_(out), max_queue_(max_queue), thread_([this] {
        SetThreadName("usage-log");
        Run();
      }) {}

LogUsageSink::~LogUsageSink() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void LogUsageSink::Record(UsageRecord record) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (queue_.size() >= max_queue_) {
      ++dropped_;
      return;
    }
    queue_.push_back(std::move(record));
  }
  // No notify: the writer wakes every 100 ms, so a request costs no thread wake-up.
}

uint64_t LogUsageSink::dropped() const {
  std::lock_guard<std::mutex> lock(mu_);
  return dropped_;
}

void LogUsageSink::Run() {
  // Background work: a request thread sharing the core comes first. (Failure leaves it at the
  // default priority, which is only slower for requests.)
  (void)setpriority(PRIO_PROCESS, static_cast<id_t>(gettid()), 10);
  std::deque<UsageRecord> batch;
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait_for(lock, std::chrono::milliseconds(100), [&] { return stop_; });
      if (queue_.empty() && stop_) return;
      batch.swap(queue_);
    }
    std::string text;
    for (const UsageRecord& r : batch) {
      text += "usage ";
      r.AppendJson(&text);
      text += '\n';
    }
    std::fwrite(text.data(), 1, text.size(), out_);
    std::fflush(out_);
    batch.clear();
  }
}

}  // namespace aicloud::gateway
