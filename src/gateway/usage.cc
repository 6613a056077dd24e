#include "gateway/usage.h"

#include <sys/resource.h>
#include <unistd.h>

#include <charconv>

#include "gateway/json_text.h"

namespace aicloud::gateway {
namespace {

void AppendInt(std::string* out, int64_t v) {
  char buf[24];
  auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), v);
  out->append(buf, end);
}

// `"key":`, after a comma unless it is the object's first.
void Key(std::string* out, std::string_view key) {
  if (out->back() != '{') out->push_back(',');
  out->push_back('"');
  out->append(key);
  out->append("\":");
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
  // for where the bytes may differ).
  out->push_back('{');
  Key(out, "adapter"), AppendJsonString(out, adapter);
  Key(out, "attempts"), AppendInt(out, attempts);
  Key(out, "completion_tokens"), AppendInt(out, completion_tokens);
  Key(out, "cost"), AppendJsonDouble(out, cost);
  Key(out, "deployment"), AppendJsonString(out, deployment);
  Key(out, "endpoint"), AppendJsonString(out, endpoint);
  if (!error.empty()) Key(out, "error"), AppendJsonString(out, error);
  Key(out, "held_s"), AppendJsonDouble(out, held_s);
  Key(out, "key_id"), AppendJsonString(out, key_id);
  Key(out, "latency_s"), AppendJsonDouble(out, latency_s);
  Key(out, "model"), AppendJsonString(out, model);
  Key(out, "prompt_tokens"), AppendInt(out, prompt_tokens);
  Key(out, "replica"), AppendJsonString(out, replica);
  Key(out, "request_id"), AppendJsonString(out, request_id);
  Key(out, "status"), AppendInt(out, status);
  Key(out, "stream"), out->append(stream ? "true" : "false");
  Key(out, "team"), AppendJsonString(out, team);
  Key(out, "tenant"), AppendJsonString(out, tenant);
  Key(out, "ttft_s"), AppendJsonDouble(out, ttft_s);
  Key(out, "unix_ms"), AppendInt(out, unix_ms);
  Key(out, "usage_reported"), out->append(usage_reported ? "true" : "false");
  out->push_back('}');
}

LogUsageSink::LogUsageSink(std::FILE* out, size_t max_queue)
    : out_(out), max_queue_(max_queue), thread_([this] { Run(); }) {}

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
