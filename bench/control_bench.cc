// control_bench: control-plane benchmarks on loopback (results and commands in bench/RESULTS.md §5).
//
//   control_bench [--dir /var/tmp] [--clients 32] [--duration 10] [--total 5000]
//                 [--e2e-jobs 200] [--nodes 5000] [--hb-interval 10] [--hb-duration 30]
//                 [--hb-warmup 5] [--hb-threads 4] [--aicloud PATH] [--parts 123]
//
// 1. Durable job submissions: C client threads POST Jobs to an in-process ApiServer (no nodes,
//    so jobs stay Pending: API + auth + durable store + audit). Baselines in the same run: the
//    same objects written by the same C threads straight into a SqliteStore with group commit
//    off (one fsync per write) and on.
// 2. Submit → Running: one fake node driven by a synthetic agent thread (long-polls its
//    assignments, reports Running at once); 200 sequential submissions.
// 3. Heartbeat cost: `aicloud server` as a separate process, N simulated nodes each reporting
//    once per interval (spread evenly); the server's CPU time from /proc/<pid>/stat.
#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "control/server.h"
#include "http/client.h"
#include "store/sqlite/sqlite_store.h"

namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;
namespace fs = std::filesystem;
namespace http = aicloud::http;

double Ms(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

struct Flags {
  std::string dir = "/var/tmp";
  int clients = 32;
  int workers = 16;  // the server's HTTP worker threads
  double duration = 10;
  int total = 5000;
  int e2e_jobs = 200;
  int nodes = 5000;
  double hb_interval = 10;
  double hb_duration = 30;
  double hb_warmup = 5;
  int hb_threads = 4;
  std::string aicloud;
  std::string parts = "123";
};

struct Stats {
  size_t n = 0;
  double p50 = 0, p90 = 0, p99 = 0, max = 0, mean = 0;
};

Stats Summarize(std::vector<double> v) {
  Stats s;
  s.n = v.size();
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  auto at = [&](double q) { return v[std::min(v.size() - 1, static_cast<size_t>(q * v.size()))]; };
  s.p50 = at(0.50);
  s.p90 = at(0.90);
  s.p99 = at(0.99);
  s.max = v.back();
  double sum = 0;
  for (double x : v) sum += x;
  s.mean = sum / v.size();
  return s;
}

[[noreturn]] void Die(const std::string& what) {
  std::cerr << "control_bench: " << what << "\n";
  std::exit(1);
}

std::string Fs(const std::string& path) {
  std::string cmd = "df -T '" + path + "' 2>/dev/null | tail -1 | awk '{print $1\" \"$2}'";
  std::string out;
  if (FILE* p = popen(cmd.c_str(), "r")) {
    char buf[256];
    while (fgets(buf, sizeof buf, p)) out += buf;
    pclose(p);
  }
  while (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

http::Headers Auth(const std::string& token) { return {{"Authorization", "Bearer " + token}}; }

json Call(http::Client& c, const std::string& token, const std::string& method, const std::string& target,
          const json& body, int want) {
  auto r = c.Send(method, target, body.is_null() ? "" : body.dump(), Auth(token));
  if (!r.ok()) Die(method + " " + target + ": " + std::string(r.status().message()));
  if (r->status != want) Die(method + " " + target + ": HTTP " + std::to_string(r->status) + " " + r->body);
  return r->body.empty() ? json() : json::parse(r->body);
}

// Runs `op(thread, index)` on `threads` threads until `total` ops or `seconds` elapsed. Returns
// per-op latencies (ms) and sets *elapsed_s.
std::vector<double> RunLoad(int threads, int total, double seconds,
                            const std::function<bool(int, int)>& op, double* elapsed_s, int* failures) {
  std::atomic<int> next{0};
  std::atomic<int> failed{0};
  std::vector<std::vector<double>> lat(threads);
  const Clock::time_point start = Clock::now();
  const Clock::time_point deadline = start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
  std::vector<std::thread> ts;
  for (int t = 0; t < threads; ++t) {
    ts.emplace_back([&, t] {
      lat[t].reserve(total / threads + 16);
      while (Clock::now() < deadline) {
        int i = next.fetch_add(1);
        if (i >= total) break;
        Clock::time_point t0 = Clock::now();
        if (!op(t, i)) ++failed;
        lat[t].push_back(Ms(Clock::now() - t0));
      }
    });
  }
  for (auto& t : ts) t.join();
  *elapsed_s = std::chrono::duration<double>(Clock::now() - start).count();
  *failures = failed.load();
  std::vector<double> all;
  for (auto& v : lat) all.insert(all.end(), v.begin(), v.end());
  return all;
}

json JobObject(const std::string& name) {
  return {{"apiVersion", "aicloud/v1"}, {"kind", "Job"},
          {"metadata", {{"name", name}, {"tenant", "bench"}}}, {"spec", {{"command", "true"}}}};
}

struct Row {
  std::string name;
  Stats s;
  double rate = 0;
  int failures = 0;
  std::string extra;
};

void PrintRow(const Row& r) {
  std::printf("%-34s %7zu %10.0f %8.2f %8.2f %8.2f %8.2f %5d  %s\n", r.name.c_str(), r.s.n, r.rate, r.s.p50,
              r.s.p90, r.s.p99, r.s.max, r.failures, r.extra.c_str());
  std::fflush(stdout);
}

// Makes User agent-bench + RoleBinding(agent) and returns an API key for it.
std::string AgentKey(http::Client& c, const std::string& admin) {
  Call(c, admin, "POST", "/api/v1/users", {{"metadata", {{"name", "agent-bench"}}}, {"spec", json::object()}}, 201);
  Call(c, admin, "POST", "/api/v1/rolebindings",
       {{"metadata", {{"name", "agent-bench"}}}, {"spec", {{"role", "agent"}, {"subjects", {"agent-bench"}}}}}, 201);
  json k = Call(c, admin, "POST", "/api/v1/apikeys", {{"user", "agent-bench"}}, 201);
  return k["token"];
}

json Part1(const Flags& f, const std::string& root) {
  std::printf("\n== 1. durable job submissions: %d clients, up to %d jobs or %.0f s each ==\n", f.clients,
              f.total, f.duration);
  std::printf("%-34s %7s %10s %8s %8s %8s %8s %5s\n", "what", "n", "per s", "p50 ms", "p90 ms", "p99 ms",
              "max ms", "fail");
  json out = json::object();
  std::vector<Row> rows;
  for (bool gc : {false, true}) {
    const std::string path = root + (gc ? "/raw-gc.db" : "/raw-nogc.db");
    auto st = aicloud::store::sqlite::SqliteStore::Open({.path = path, .group_commit = gc});
    if (!st.ok()) Die(std::string(st.status().message()));
    auto& store = **st;
    double el = 0;
    int fail = 0;
    auto lat = RunLoad(f.clients, f.total, f.duration, [&](int t, int i) {
      return store.Create(JobObject("j-" + std::to_string(t) + "-" + std::to_string(i))).ok();
    }, &el, &fail);
    Row r{gc ? "store, group commit" : "store, one commit per write", Summarize(lat), lat.size() / el, fail, ""};
    char buf[96];
    std::snprintf(buf, sizeof buf, "%.1f writes/commit", store.commits() ? double(store.committed_transactions()) / store.commits() : 0.0);
    r.extra = buf;
    PrintRow(r);
    rows.push_back(r);
  }
  {
    auto s = aicloud::control::ApiServer::Start({.data_dir = root + "/api", .port = 0, .worker_threads = f.workers});
    if (!s.ok()) Die(std::string(s.status().message()));
    auto& server = **s;
    const std::string admin = *server.bootstrap_token();
    {
      http::Client c(server.url());
      Call(c, admin, "POST", "/api/v1/tenants", {{"metadata", {{"name", "bench"}}}, {"spec", json::object()}}, 201);
    }
    std::vector<std::unique_ptr<http::Client>> clients;
    for (int t = 0; t < f.clients; ++t) clients.push_back(std::make_unique<http::Client>(server.url()));
    const http::Headers h = Auth(admin);
    double el = 0;
    int fail = 0;
    std::mutex err_mu;
    std::string first_err;
    auto lat = RunLoad(f.clients, f.total, f.duration, [&](int t, int i) {
      json j = {{"metadata", {{"name", "j-" + std::to_string(t) + "-" + std::to_string(i)}}},
                {"spec", {{"command", "true"}}}};
      auto r = clients[t]->Send("POST", "/api/v1/tenants/bench/jobs", j.dump(), h);
      bool ok = r.ok() && r->status == 201;
      if (!ok) {
        std::lock_guard<std::mutex> l(err_mu);
        if (first_err.empty()) first_err = r.ok() ? std::to_string(r->status) + " " + r->body : std::string(r.status().message());
      }
      return ok;
    }, &el, &fail);
    Row r{"HTTP API POST /jobs (full server)", Summarize(lat), lat.size() / el, fail, ""};
    auto* sq = dynamic_cast<aicloud::store::sqlite::SqliteStore*>(server.store());
    if (sq != nullptr) {
      char buf[96];
      std::snprintf(buf, sizeof buf, "%.1f writes/commit (incl. audit)",
                    sq->commits() ? double(sq->committed_transactions()) / sq->commits() : 0.0);
      r.extra = buf;
    }
    PrintRow(r);
    if (!first_err.empty()) std::printf("  first failure: %s\n", first_err.c_str());
    rows.push_back(r);
    clients.clear();
    server.Stop();
  }
  std::printf("ratios: group/no-group store %.2fx; API/no-group store %.2fx; API/group store %.2fx\n",
              rows[1].rate / rows[0].rate, rows[2].rate / rows[0].rate, rows[2].rate / rows[1].rate);
  for (const Row& r : rows) {
    out[r.name] = {{"n", r.s.n}, {"per_s", r.rate}, {"p50_ms", r.s.p50}, {"p90_ms", r.s.p90},
                   {"p99_ms", r.s.p99}, {"max_ms", r.s.max}, {"failures", r.failures}};
  }
  out["api_vs_store_nogc"] = rows[2].rate / rows[0].rate;
  out["store_gc_vs_nogc"] = rows[1].rate / rows[0].rate;
  return out;
}

json Part2(const Flags& f, const std::string& root) {
  std::printf("\n== 2. submit -> Running: %d sequential jobs, one fake node ==\n", f.e2e_jobs);
  auto s = aicloud::control::ApiServer::Start({.data_dir = root + "/e2e", .port = 0});
  if (!s.ok()) Die(std::string(s.status().message()));
  auto& server = **s;
  const std::string admin = *server.bootstrap_token();
  http::Client c(server.url());
  Call(c, admin, "POST", "/api/v1/tenants", {{"metadata", {{"name", "bench"}}}, {"spec", json::object()}}, 201);
  const std::string agent = AgentKey(c, admin);
  const std::string node = "bench-node";
  http::Client ac(server.url());
  json reg = Call(ac, agent, "POST", "/api/v1/agent/nodes/" + node + "/register",
                  {{"spec", {{"cpuMillis", 64000}, {"memoryBytes", int64_t{256} << 30}}}}, 200);
  const std::string epoch = reg["epoch"], instance = reg["instance"];
  Call(ac, agent, "POST", "/api/v1/agent/nodes/" + node + "/report?epoch=" + epoch, json{{"attempts", json::array()}}, 200);

  std::mutex mu;
  std::condition_variable cv;
  std::map<std::string, std::pair<std::string, Clock::time_point>> running;  // job → (attempt, report sent)
  std::atomic<bool> stop{false};
  std::thread agent_thread([&] {
    http::Client poll(server.url(), {.timeout = std::chrono::milliseconds(30000)});
    http::Client rep(server.url());
    std::set<std::string> seen;
    int64_t after = -1;
    while (!stop) {
      auto r = poll.Send("GET", "/api/v1/agent/nodes/" + node + "/assignments?epoch=" + epoch + "&instance=" +
                                    instance + "&after=" + std::to_string(after) + "&waitMs=20000", "", Auth(agent));
      if (!r.ok() || r->status != 200) {
        if (!stop) std::cerr << "assignments: " << (r.ok() ? r->body : std::string(r.status().message())) << "\n";
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        continue;
      }
      json w = json::parse(r->body);
      after = w.value("version", after);
      for (const json& a : w["attempts"]) {
        const std::string id = a["attempt"];
        if (!seen.insert(id).second) continue;
        Clock::time_point sent = Clock::now();
        json body = {{"attempts", {{{"attempt", id}, {"state", "Running"}}}}};
        auto rr = rep.Send("POST", "/api/v1/agent/nodes/" + node + "/report?epoch=" + epoch, body.dump(), Auth(agent));
        if (!rr.ok() || rr->status != 200) std::cerr << "report: " << (rr.ok() ? rr->body : "") << "\n";
        std::lock_guard<std::mutex> l(mu);
        running[a["job"]] = {id, sent};
        cv.notify_all();
      }
    }
  });

  std::vector<double> to_report, to_phase;
  http::Client getter(server.url());
  for (int i = 0; i < f.e2e_jobs; ++i) {
    const std::string name = "e2e-" + std::to_string(i);
    json j = {{"metadata", {{"name", name}}},
              {"spec", {{"command", "true"}, {"resources", {{"cpu", "100m"}, {"memory", "64Mi"}}}}}};
    Clock::time_point t0 = Clock::now();
    Call(c, admin, "POST", "/api/v1/tenants/bench/jobs", j, 201);
    std::string attempt;
    {
      std::unique_lock<std::mutex> l(mu);
      if (!cv.wait_for(l, std::chrono::seconds(30), [&] { return running.count(name) > 0; })) Die("job " + name + " never assigned");
      attempt = running[name].first;
      to_report.push_back(Ms(running[name].second - t0));
    }
    for (;;) {
      json o = Call(getter, admin, "GET", "/api/v1/tenants/bench/jobs/" + name, json(), 200);
      if (o["status"].value("phase", "") == "Running") break;
      if (Ms(Clock::now() - t0) > 30000) Die("job " + name + " never Running: " + o["status"].dump());
      std::this_thread::sleep_for(std::chrono::microseconds(500));
    }
    to_phase.push_back(Ms(Clock::now() - t0));
    // Finish it so its resources are freed; wait (untimed) until the server saw it.
    Call(c, agent, "POST", "/api/v1/agent/nodes/" + node + "/report?epoch=" + epoch,
         json{{"attempts", {{{"attempt", attempt}, {"state", "Succeeded"}, {"exitCode", 0}}}}}, 200);
    for (;;) {
      json o = Call(getter, admin, "GET", "/api/v1/tenants/bench/jobs/" + name, json(), 200);
      if (o["status"].value("phase", "") == "Succeeded") break;
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  }
  stop = true;
  server.Stop();
  agent_thread.join();
  Stats a = Summarize(to_report), b = Summarize(to_phase);
  std::printf("%-44s %6s %8s %8s %8s %8s\n", "what", "n", "p50 ms", "p90 ms", "p99 ms", "max ms");
  std::printf("%-44s %6zu %8.2f %8.2f %8.2f %8.2f\n", "POST job -> agent sends Running report", a.n, a.p50, a.p90, a.p99, a.max);
  std::printf("%-44s %6zu %8.2f %8.2f %8.2f %8.2f\n", "POST job -> GET shows status.phase Running", b.n, b.p50, b.p90, b.p99, b.max);
  return {{"to_report", {{"p50_ms", a.p50}, {"p90_ms", a.p90}, {"p99_ms", a.p99}, {"max_ms", a.max}}},
          {"to_phase_running", {{"p50_ms", b.p50}, {"p90_ms", b.p90}, {"p99_ms", b.p99}, {"max_ms", b.max}}}};
}

double ProcCpuSeconds(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string s((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  size_t p = s.rfind(')');
  if (p == std::string::npos) return -1;
  std::istringstream rest(s.substr(p + 2));
  std::vector<std::string> fields;
  std::string x;
  while (rest >> x) fields.push_back(x);
  // fields[0] is field 3 (state); utime = field 14, stime = field 15.
  double ticks = std::stod(fields[11]) + std::stod(fields[12]);
  return ticks / sysconf(_SC_CLK_TCK);
}

double SelfCpuSeconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_utime.tv_sec + u.ru_utime.tv_usec / 1e6 + u.ru_stime.tv_sec + u.ru_stime.tv_usec / 1e6;
}

json Part3(const Flags& f, const std::string& root) {
  std::printf("\n== 3. heartbeat cost: %d nodes, one report each per %.0f s, %.0f s window (+%.0f s warm-up) ==\n",
              f.nodes, f.hb_interval, f.hb_duration, f.hb_warmup);
  const std::string data = root + "/hb";
  int out_pipe[2];
  if (pipe(out_pipe) != 0) Die("pipe");
  pid_t pid = fork();
  if (pid == 0) {
    dup2(out_pipe[1], 1);
    close(out_pipe[0]);
    close(out_pipe[1]);
    execl(f.aicloud.c_str(), f.aicloud.c_str(), "server", "--data-dir", data.c_str(), "--port", "0",
          static_cast<char*>(nullptr));
    std::perror("exec aicloud");
    _exit(127);
  }
  close(out_pipe[1]);
  FILE* out = fdopen(out_pipe[0], "r");
  std::string url, admin;
  char line[4096];
  bool want_token = false;
  while ((url.empty() || admin.empty()) && fgets(line, sizeof line, out)) {
    std::string l(line);
    while (!l.empty() && (l.back() == '\n' || l.back() == ' ')) l.pop_back();
    if (want_token) {
      admin = l.substr(l.find_first_not_of(' '));
      want_token = false;
    }
    if (auto p = l.find("listening on "); p != std::string::npos) {
      url = l.substr(p + 13);
      url = url.substr(0, url.find(' '));
    }
    if (l.find("bootstrap admin token") != std::string::npos) want_token = true;
  }
  if (url.empty() || admin.empty()) Die("could not read url/token from aicloud server output");
  // Keep draining the server's stdout so it never blocks.
  std::thread drain([out] {
    char b[4096];
    while (fgets(b, sizeof b, out)) {
    }
  });

  http::Client c(url);
  const std::string agent = AgentKey(c, admin);
  std::vector<std::string> epochs(f.nodes);
  {
    double el = 0;
    int fail = 0;
    std::vector<std::unique_ptr<http::Client>> cs;
    for (int t = 0; t < f.hb_threads; ++t) cs.push_back(std::make_unique<http::Client>(url));
    auto lat = RunLoad(f.hb_threads, f.nodes, 1e9, [&](int t, int i) {
      const std::string n = "sim-" + std::to_string(i);
      json spec = {{"spec", {{"cpuMillis", 32000}, {"memoryBytes", int64_t{128} << 30},
                             {"labels", {{"aicloud/simulated", "true"}}}}}};
      auto r = cs[t]->Send("POST", "/api/v1/agent/nodes/" + n + "/register", spec.dump(), Auth(agent));
      if (!r.ok() || r->status != 200) return false;
      epochs[i] = json::parse(r->body)["epoch"];
      return true;
    }, &el, &fail);
    if (fail) Die(std::to_string(fail) + " registrations failed");
    Stats s = Summarize(lat);
    std::printf("registered %d nodes in %.1f s (%.0f/s, p99 %.1f ms)\n", f.nodes, el, f.nodes / el, s.p99);
  }

  // Node i reports at start + (i / nodes + k) * interval.
  const Clock::time_point start = Clock::now();
  const auto secs = [](double s) { return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s)); };
  const Clock::time_point measure_from = start + secs(f.hb_warmup);
  const Clock::time_point end = measure_from + secs(f.hb_duration);
  std::atomic<int> fails{0};
  std::vector<std::vector<double>> lat(f.hb_threads);
  std::vector<int> sent_in_window(f.hb_threads, 0);
  double cpu0 = 0, self0 = 0;
  std::atomic<bool> measured{false};
  std::thread sampler([&] {
    std::this_thread::sleep_until(measure_from);
    cpu0 = ProcCpuSeconds(pid);
    self0 = SelfCpuSeconds();
    measured = true;
  });
  std::vector<std::thread> ts;
  for (int t = 0; t < f.hb_threads; ++t) {
    ts.emplace_back([&, t] {
      http::Client hc(url);
      const std::string ah = "Bearer " + agent;
      for (int64_t k = 0;; ++k) {
        for (int i = t; i < f.nodes; i += f.hb_threads) {
          Clock::time_point due = start + secs((double(i) / f.nodes + k) * f.hb_interval);
          if (due >= end) return;
          std::this_thread::sleep_until(due);
          json body = {{"metrics", {{"cpuUtil", 0.12}, {"memUsedBytes", int64_t{1} << 30}}}, {"attempts", json::array()}};
          Clock::time_point t0 = Clock::now();
          auto r = hc.Send("POST", "/api/v1/agent/nodes/sim-" + std::to_string(i) + "/report?epoch=" + epochs[i],
                           body.dump(), {{"Authorization", ah}});
          if (!r.ok() || r->status != 200) ++fails;
          if (due >= measure_from) {
            lat[t].push_back(Ms(Clock::now() - t0));
            ++sent_in_window[t];
          }
        }
      }
    });
  }
  for (auto& t : ts) t.join();
  sampler.join();
  const double cpu1 = ProcCpuSeconds(pid), self1 = SelfCpuSeconds();
  const double window = std::chrono::duration<double>(Clock::now() - measure_from).count();
  kill(pid, SIGTERM);
  int st = 0;
  waitpid(pid, &st, 0);
  drain.join();
  fclose(out);

  std::vector<double> all;
  int sent = 0;
  for (int t = 0; t < f.hb_threads; ++t) {
    all.insert(all.end(), lat[t].begin(), lat[t].end());
    sent += sent_in_window[t];
  }
  Stats s = Summarize(all);
  const double server_pct = 100 * (cpu1 - cpu0) / window;
  const double client_pct = 100 * (self1 - self0) / window;
  std::printf("reports in window %d over %.1f s = %.0f/s (target %.0f/s), failures %d\n", sent, window, sent / window,
              f.nodes / f.hb_interval, fails.load());
  std::printf("report latency ms: p50 %.2f p90 %.2f p99 %.2f max %.2f\n", s.p50, s.p90, s.p99, s.max);
  std::printf("server process CPU: %.2f s over %.1f s = %.1f%% of one core (bench client itself: %.1f%%)\n",
              cpu1 - cpu0, window, server_pct, client_pct);
  return {{"nodes", f.nodes}, {"reports_per_s", sent / window}, {"failures", fails.load()},
          {"p50_ms", s.p50}, {"p99_ms", s.p99}, {"max_ms", s.max},
          {"server_cpu_pct_of_core", server_pct}, {"client_cpu_pct_of_core", client_pct}};
}

}  // namespace

int main(int argc, char** argv) {
  Flags f;
  f.aicloud = (fs::path(argv[0]).parent_path() / "aicloud").string();
  if (!fs::exists(f.aicloud)) f.aicloud = (fs::path(argv[0]).parent_path().parent_path() / "aicloud").string();
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto val = [&]() -> std::string {
      if (i + 1 >= argc) Die("missing value for " + a);
      return argv[++i];
    };
    if (a == "--dir") f.dir = val();
    else if (a == "--clients") f.clients = std::stoi(val());
    else if (a == "--workers") f.workers = std::stoi(val());
    else if (a == "--duration") f.duration = std::stod(val());
    else if (a == "--total") f.total = std::stoi(val());
    else if (a == "--e2e-jobs") f.e2e_jobs = std::stoi(val());
    else if (a == "--nodes") f.nodes = std::stoi(val());
    else if (a == "--hb-interval") f.hb_interval = std::stod(val());
    else if (a == "--hb-duration") f.hb_duration = std::stod(val());
    else if (a == "--hb-warmup") f.hb_warmup = std::stod(val());
    else if (a == "--hb-threads") f.hb_threads = std::stoi(val());
    else if (a == "--aicloud") f.aicloud = val();
    else if (a == "--parts") f.parts = val();
    else Die("unknown flag " + a + " (see the header of bench/control_bench.cc)");
  }
  signal(SIGPIPE, SIG_IGN);
  std::string tmpl = f.dir + "/control_bench.XXXXXX";
  if (mkdtemp(tmpl.data()) == nullptr) Die("mkdtemp in " + f.dir);
  const std::string root = tmpl;
  std::printf("control_bench: data in %s (%s), %u hardware threads\n", root.c_str(), Fs(root).c_str(),
              std::thread::hardware_concurrency());
  json summary = {{"dir", root}, {"filesystem", Fs(root)}};
  if (f.parts.find('1') != std::string::npos) summary["submissions"] = Part1(f, root);
  if (f.parts.find('2') != std::string::npos) summary["submit_to_running"] = Part2(f, root);
  if (f.parts.find('3') != std::string::npos) summary["heartbeats"] = Part3(f, root);
  std::printf("\nsummary: %s\n", summary.dump().c_str());
  std::error_code ec;
  fs::remove_all(root, ec);
  return 0;
}
