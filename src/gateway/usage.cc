#include "gateway/usage.h"

namespace aicloud::gateway {

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
  std::deque<UsageRecord> batch;
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait_for(lock, std::chrono::milliseconds(100), [&] { return stop_; });
      if (queue_.empty() && stop_) return;
      batch.swap(queue_);
    }
    std::string text;
    for (const UsageRecord& r : batch) text += "usage " + r.ToJson().dump() + "\n";
    std::fwrite(text.data(), 1, text.size(), out_);
    std::fflush(out_);
    batch.clear();
  }
}

}  // namespace aicloud::gateway
