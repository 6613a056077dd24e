#include "gateway/usage.h"

#include <sys/resource.h>
#include <unistd.h>

#include <charconv>

namespace aicloud::gateway {
namespace {

// JSON string escaping as nlohmann's dump does it (UTF-8 passes through; the fields are names
// and messages that arrived in parsed JSON or were written by the gateway).
void AppendString(std::string* out, std::string_view s) {
  static constexpr char kHex[] = "0123456789abcdef";
  out->push_back('"');
  for (char c : s) {
    const auto u = static_cast<unsigned char>(c);
    switch (c) {
      case '"': out->append("\\\""); break;
      case '\\': out->append("\\\\"); break;
      case '\b': out->append("\\b"); break;
      case '\f': out->append("\\f"); break;
      case '\n': out->append("\\n"); break;
      case '\r': out->append("\\r"); break;
      case '\t': out->append("\\t"); break;
      default:
        if (u < 0x20) {
          out->append("\\u00");
          out->push_back(kHex[u >> 4]);
          out->push_back(kHex[u & 15]);
        } else {
          out->push_back(c);
        }
    }
  }
  out->push_back('"');
}

void AppendInt(std::string* out, int64_t v) {
  char buf[24];
  auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), v);
  out->append(buf, end);
}

// Doubles exactly as nlohmann writes them ("0.0001", "100000.0", "1e-300"; null if not finite):
// one small JSON value instead of a document.
void AppendDouble(std::string* out, double v) { out->append(nlohmann::json(v).dump()); }

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
  // Keys in nlohmann's (sorted) order, so a line is byte for byte ToJson().dump() (for valid UTF-8;
  // other bytes pass through where dump() would throw).
  out->push_back('{');
  Key(out, "adapter"), AppendString(out, adapter);
  Key(out, "attempts"), AppendInt(out, attempts);
  Key(out, "completion_tokens"), AppendInt(out, completion_tokens);
  Key(out, "cost"), AppendDouble(out, cost);
  Key(out, "deployment"), AppendString(out, deployment);
  Key(out, "endpoint"), AppendString(out, endpoint);
  if (!error.empty()) Key(out, "error"), AppendString(out, error);
  Key(out, "held_s"), AppendDouble(out, held_s);
  Key(out, "key_id"), AppendString(out, key_id);
  Key(out, "latency_s"), AppendDouble(out, latency_s);
  Key(out, "model"), AppendString(out, model);
  Key(out, "prompt_tokens"), AppendInt(out, prompt_tokens);
  Key(out, "replica"), AppendString(out, replica);
  Key(out, "request_id"), AppendString(out, request_id);
  Key(out, "status"), AppendInt(out, status);
  Key(out, "stream"), out->append(stream ? "true" : "false");
  Key(out, "team"), AppendString(out, team);
  Key(out, "tenant"), AppendString(out, tenant);
  Key(out, "ttft_s"), AppendDouble(out, ttft_s);
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
