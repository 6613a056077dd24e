// The serving half of `aicloud up --demo` (see up_demo.h).
#include "cli/up_demo.h"

#include <chrono>
#include <filesystem>
#include <functional>
#include <iostream>
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <thread>

#include "engine/model/random_checkpoint.h"
#include "http/client.h"
#include "http/sse.h"

namespace aicloud::cli {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

std::string Fixed(double v, int digits = 1) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

// A reply's error message (OpenAI or API error body), else the start of its body.
std::string ErrorOf(const http::ClientResponse& r) {
  json j = json::parse(r.body, nullptr, false);
  if (j.is_object() && j.contains("error")) {
    const json& e = j["error"];
    if (e.is_object()) return e.value("message", r.body);
    if (e.is_string()) return e.get<std::string>();
  }
  if (j.is_object() && j.contains("message") && j["message"].is_string()) return j["message"].get<std::string>();
  return r.body.substr(0, 300);
}

// Token text as it prints on one line: control characters shown as escapes.
std::string Printable(std::string_view s) {
  std::string out;
  for (unsigned char c : s) {
    if (c == '\n') out += "\\n";
    else if (c < 0x20 || c == 0x7f) out += fmt::format("\\x{:02x}", c);
    else out += static_cast<char>(c);
  }
  return out;
}

class Demo {
 public:
  explicit Demo(const ServingDemoOptions& o) : o_(o), api_(o.server_url, http::ClientOptions{.ca_file = o.ca_file}) {}

  StatusOr<std::string> Run() {
    std::cout << "aicloud up: serving demo: a model deployed with min 0 replicas, called through the OpenAI front door\n";
    StatusOr<std::string> model = WriteModel();
    if (!model.ok()) return model.status();
    AICLOUD_RETURN_IF_ERROR(ApplyDeployment(*model));
    AICLOUD_RETURN_IF_ERROR(EnsureTenant("other"));
    // The key of tenant other only shows the 403: revoked after it (and expiring in 10 minutes
    // should the demo stop before), so runs on one data directory do not pile up live keys.
    StatusOr<ApiKey> demo = MakeKey("demo", 0), other = MakeKey("other", 600);
    if (!demo.ok()) return demo.status();
    if (!other.ok()) return other.status();
    demo_key_ = std::move(demo->token);
    other_key_ = std::move(other->token);
    other_key_id_ = std::move(other->id);
    std::cout << "  keys: one for tenant demo, one for tenant other (POST /api/v1/apikeys)\n";
    AICLOUD_RETURN_IF_ERROR(WaitRoutable());
    AICLOUD_RETURN_IF_ERROR(ChatFromZero());
    AICLOUD_RETURN_IF_ERROR(OtherTenantRefused());
    // Revoked on another connection: api_'s connection carries only the key's calls.
    http::Client admin(o_.server_url, http::ClientOptions{.ca_file = o_.ca_file});
    StatusOr<http::ClientResponse> revoked = admin.Send("DELETE", "/api/v1/apikeys/" + other_key_id_, "", Admin());
    if (revoked.ok() && revoked->status == 200) {
      std::cout << "  tenant other's key revoked (DELETE /api/v1/apikeys/" << other_key_id_ << ")\n";
      AICLOUD_RETURN_IF_ERROR(RevokedKeyRefused());
    } else {
      std::cerr << "aicloud up: could not revoke tenant other's demo key " << other_key_id_ << " (it expires in 10 minutes): "
                << (revoked.ok() ? "HTTP " + std::to_string(revoked->status) + ": " + ErrorOf(*revoked)
                                 : std::string(revoked.status().message()))
                << "\n";
    }
    AICLOUD_RETURN_IF_ERROR(ScaleToZero());
    std::cout << "aicloud up: serving demo done\n";
    return demo_key_;
  }

 private:
  http::Headers Admin() const {
    return {{"Authorization", "Bearer " + o_.admin_token}, {"Content-Type", "application/json"}};
  }
  static http::Headers Key(const std::string& key) {
    return {{"Authorization", "Bearer " + key}, {"Content-Type", "application/json"}};
  }

  StatusOr<std::string> WriteModel() {
    const std::filesystem::path dir = std::filesystem::absolute(std::filesystem::path(o_.data_dir) / "models" / "demo-chat");
    if (std::filesystem::exists(dir / "config.json")) {
      std::cout << "  model: " << dir.string() << " (written by an earlier demo)\n";
      return dir.string();
    }
    if (!std::filesystem::exists(o_.tokenizer)) {
      return FailedPreconditionError("the demo model's vocabulary comes from " + o_.tokenizer +
                                     ", which does not exist: run from the repository root or pass "
                                     "--demo-tokenizer FILE (a Hugging Face tokenizer.json)");
    }
    engine::InitCheckpointOptions init;
    engine::ModelConfig& c = init.config;
    c.model_type = "llama";
    c.hidden_size = 64;
    c.num_hidden_layers = 2;
    c.num_attention_heads = 4;
    c.num_key_value_heads = 2;
    c.head_dim = 16;
    c.intermediate_size = 128;
    c.max_position_embeddings = 2048;
    c.rope_theta = 10000;
    c.rms_norm_eps = 1e-5;
    init.dtype = engine::DType::kF16;
    init.seed = 3;
    init.tokenizer_json = o_.tokenizer;
    const auto t0 = Clock::now();
    StatusOr<engine::ModelConfig> written = engine::InitRandomCheckpoint(dir, init);
    if (!written.ok()) return Status(written.status().code(), "demo model: " + written.status().message());
    std::cout << "  model: random-weight Llama (hidden 64, 2 layers, vocabulary " << written->vocab_size << " from "
              << o_.tokenizer << ") written to " << dir.string() << " in " << Fixed(SecondsSince(t0), 2) << " s\n";
    return dir.string();
  }

  Status ApplyDeployment(const std::string& model) {
    const json d = {
        {"apiVersion", "aicloud/v1"},
        {"kind", "Deployment"},
        {"metadata", {{"name", "chat"}}},
        {"spec",
         {{"model", model},
          {"replicas", {{"min", 0}, {"max", 2}}},
          {"profile", "latency"},
          {"scaleToZeroSeconds", kIdleSeconds},
          {"resources", {{"cpu", "1"}, {"memory", "1Gi"}}},
          {"engine", {{"threads", 1}, {"kvCacheGiB", 0.05}}}}}};
    StatusOr<http::ClientResponse> r = api_.Send("POST", "/api/v1/tenants/demo/deployments", d.dump(), Admin());
    if (!r.ok()) return Status(r.status().code(), "apply deployment demo/chat: " + r.status().message());
    if (r->status == 409) {
      std::cout << "  deployment demo/chat: exists (made by an earlier demo), used as it is\n";
      return OkStatus();
    }
    if (r->status != 201) return InternalError("apply deployment demo/chat: HTTP " + std::to_string(r->status) + ": " + ErrorOf(*r));
    std::cout << "  deployment demo/chat applied (POST /api/v1/tenants/demo/deployments): replicas {min: 0, max: 2}, "
                 "profile latency, scale to zero after "
              << kIdleSeconds << " s idle\n";
    return OkStatus();
  }

  Status EnsureTenant(const std::string& name) {
    const json t = {{"apiVersion", "aicloud/v1"}, {"kind", "Tenant"}, {"metadata", {{"name", name}}}};
    StatusOr<http::ClientResponse> r = api_.Send("POST", "/api/v1/tenants", t.dump(), Admin());
    if (!r.ok()) return Status(r.status().code(), "create tenant " + name + ": " + r.status().message());
    if (r->status != 201 && r->status != 409) {
      return InternalError("create tenant " + name + ": HTTP " + std::to_string(r->status) + ": " + ErrorOf(*r));
    }
    return OkStatus();
  }

  struct ApiKey {
    std::string token, id;
  };
  // A key of `tenant`, expiring after `expires_s` seconds when > 0.
  StatusOr<ApiKey> MakeKey(const std::string& tenant, int expires_s) {
    json body = {{"user", "admin"}, {"tenant", tenant}};
    if (expires_s > 0) body["expiresInSeconds"] = expires_s;
    StatusOr<http::ClientResponse> r = api_.Send("POST", "/api/v1/apikeys", body.dump(), Admin());
    if (!r.ok()) return Status(r.status().code(), "key for tenant " + tenant + ": " + r.status().message());
    json j = json::parse(r->body, nullptr, false);
    if (r->status != 201 || !j.is_object() || !j.contains("token") || !j["token"].is_string()) {
      return InternalError("key for tenant " + tenant + ": HTTP " + std::to_string(r->status) + ": " + ErrorOf(*r));
    }
    return ApiKey{j["token"].get<std::string>(), j.value("id", std::string())};
  }

  StatusOr<json> Deployment() {
    StatusOr<http::ClientResponse> r = api_.Send("GET", "/api/v1/tenants/demo/deployments/chat", "", Admin());
    if (!r.ok()) return r.status();
    json j = json::parse(r->body, nullptr, false);
    if (r->status != 200 || !j.is_object()) {
      return InternalError("get deployment demo/chat: HTTP " + std::to_string(r->status) + ": " + ErrorOf(*r));
    }
    return j;
  }

  static int Replicas(const json& d) {
    const json s = d.value("status", json::object());
    return s.is_object() ? s.value("replicas", 0) : 0;
  }

  // Why the controller last changed the replica count.
  static std::string LastScale(const json& d) {
    const json s = d.value("status", json::object());
    const json scale = s.is_object() ? s.value("lastScale", json::object()) : json::object();
    return scale.is_object() ? scale.value("reason", std::string()) : std::string();
  }

  // Polls `done` every 200 ms until it holds or `seconds` pass.
  static bool WaitFor(double seconds, const std::function<bool()>& done) {
    const auto deadline = Clock::now() + std::chrono::duration<double>(seconds);
    while (!done()) {
      if (Clock::now() >= deadline) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    return true;
  }

  // Routable once the controller has seen the deployment and the front door has read its route:
  // /v1/models lists it for demo's key.
  Status WaitRoutable() {
    std::string last;
    const bool listed = WaitFor(30, [&] {
      StatusOr<http::ClientResponse> r = api_.Send("GET", "/v1/models", "", Key(demo_key_));
      if (!r.ok()) {
        last = r.status().message();
        return false;
      }
      last = "HTTP " + std::to_string(r->status) + ": " + r->body.substr(0, 200);
      json j = json::parse(r->body, nullptr, false);
      if (r->status != 200 || !j.is_object() || !j.contains("data") || !j["data"].is_array()) return false;
      for (const json& m : j["data"]) {
        if (m.is_object() && m.value("id", "") == "chat") return true;
      }
      return false;
    });
    if (!listed) return DeadlineExceededError("deployment demo/chat was not listed by GET /v1/models within 30 s: " + last);
    StatusOr<json> d = Deployment();
    if (!d.ok()) return d.status();
    std::cout << "  GET /v1/models with demo's key lists chat; replicas now: " << Replicas(*d) << "\n";
    return OkStatus();
  }

  Status ChatFromZero() {
    const json body = {{"model", "chat"},
                       {"stream", true},
                       {"stream_options", {{"include_usage", true}}},
                       {"max_tokens", 24},
                       {"ignore_eos", true},
                       {"messages", {{{"role", "user"}, {"content", "Say hello to the cluster."}}}}};
    std::cout << "  POST /v1/chat/completions (stream) with demo's key: no replica is ready, so the request is held "
                 "while one starts\n"
              << std::flush;
    const auto t0 = Clock::now();
    double first_s = -1;
    int pieces = 0;     // chunks with text
    int64_t tokens = -1;  // the usage chunk's completion_tokens
    bool done = false;
    std::string error;
    http::SseParser sse;
    http::ClientResponse head;  // filled before the first chunk
    std::string refusal;        // the body of an answer other than 200
    http::Client chat(o_.server_url, http::ClientOptions{.ca_file = o_.ca_file, .timeout = std::chrono::seconds(120)});
    Status st = chat.Stream(
        "POST", "/v1/chat/completions", body.dump(), Key(demo_key_),
        [&](std::string_view bytes) {
          if (head.status != 200) {
            refusal.append(bytes);
            return refusal.size() < 4096;
          }
          for (const http::SseEvent& e : sse.Feed(bytes)) {
            if (e.data == "[DONE]") {
              done = true;
              continue;
            }
            json j = json::parse(e.data, nullptr, false);
            if (!j.is_object()) continue;
            if (j.contains("error")) {
              error = j["error"].is_object() ? j["error"].value("message", e.data) : e.data;
              continue;
            }
            if (j.contains("usage") && j["usage"].is_object()) tokens = j["usage"].value("completion_tokens", int64_t{-1});
            if (!j.contains("choices") || !j["choices"].is_array() || j["choices"].empty()) continue;
            const json& delta = j["choices"][0].value("delta", json::object());
            if (!delta.is_object() || !delta.contains("content") || !delta["content"].is_string()) continue;
            const std::string text = delta["content"].get<std::string>();
            if (text.empty()) continue;  // the first chunk names the role only
            if (first_s < 0) {
              first_s = SecondsSince(t0);
              std::cout << "  first token after " << Fixed(first_s) << " s; the reply streams (random weights, so the "
                           "words are random):\n    \"";
            }
            ++pieces;
            std::cout << Printable(text) << std::flush;
          }
          return true;
        },
        &head);
    if (first_s >= 0) std::cout << "\"\n";
    if (!st.ok()) return Status(st.code(), "streaming chat request: " + st.message());
    if (head.status != 200) {
      return InternalError("streaming chat request: HTTP " + std::to_string(head.status) + ": " +
                           ErrorOf(http::ClientResponse{.status = head.status, .body = refusal}));
    }
    if (!error.empty()) return InternalError("streaming chat request: the stream ended with an error: " + error);
    if (!done || pieces == 0 || tokens <= 0) {
      return InternalError("streaming chat request: " + std::to_string(pieces) + " chunks with text, " +
                           (tokens < 0 ? "no usage" : std::to_string(tokens) + " tokens in the usage") + " and " +
                           (done ? "" : "no ") + "[DONE]");
    }
    StatusOr<json> d = Deployment();
    if (!d.ok()) return d.status();
    std::cout << "  " << tokens << " tokens in " << Fixed(SecondsSince(t0)) << " s; deployment chat now has "
              << Replicas(*d) << " replica(s) (\"" << LastScale(*d) << "\")\n";
    return OkStatus();
  }

  Status OtherTenantRefused() { return ChatRefused(403, "other's key", "tenant other's key"); }

  // On the connection that used the key before (the front door remembers a connection's caller
  // until what keys authenticate to changes): its next call is a 401.
  Status RevokedKeyRefused() { return ChatRefused(401, "the revoked key", "the revoked key"); }

  // A small chat request with tenant other's key on api_'s connection must get HTTP `want`.
  Status ChatRefused(int want, const std::string& key_name, const std::string& shown) {
    const json body = {{"model", "chat"}, {"max_tokens", 4}, {"messages", {{{"role", "user"}, {"content", "hi"}}}}};
    StatusOr<http::ClientResponse> r = api_.Send("POST", "/v1/chat/completions", body.dump(), Key(other_key_));
    if (!r.ok()) return Status(r.status().code(), "chat request with " + key_name + ": " + r.status().message());
    if (r->status != want) {
      return InternalError("chat request with " + key_name + ": want HTTP " + std::to_string(want) + ", got " +
                           std::to_string(r->status) + ": " + ErrorOf(*r));
    }
    std::cout << "  the same request with " << shown << ": HTTP " << want << ", \"" << ErrorOf(*r) << "\"\n";
    return OkStatus();
  }

  Status ScaleToZero() {
    std::cout << "  no more requests: waiting for the deployment to scale to zero (scaleToZeroSeconds " << kIdleSeconds
              << ")\n"
              << std::flush;
    const auto t0 = Clock::now();
    json last;
    const bool zero = WaitFor(kIdleSeconds + 60, [&] {
      StatusOr<json> d = Deployment();
      if (!d.ok()) return false;
      last = *d;
      return Replicas(last) == 0;
    });
    if (!zero) {
      return DeadlineExceededError("deployment demo/chat still has " + std::to_string(Replicas(last)) +
                                   " replica(s) " + std::to_string(kIdleSeconds + 60) + " s after its last request");
    }
    std::cout << "  deployment chat: 0 replicas after " << Fixed(SecondsSince(t0)) << " s (\"" << LastScale(last)
              << "\")\n";
    return OkStatus();
  }

  static constexpr int kIdleSeconds = 10;
  const ServingDemoOptions o_;
  http::Client api_;
  std::string demo_key_, other_key_, other_key_id_;
};

}  // namespace

StatusOr<std::string> RunServingDemo(const ServingDemoOptions& o) { return Demo(o).Run(); }

}  // namespace aicloud::cli
