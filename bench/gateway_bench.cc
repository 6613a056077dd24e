// Gateway overhead: an open-loop load generator at a fixed rate over keep-alive connections,
// measuring the latency of the same small /v1/chat/completions call sent
//   direct   straight to a stub upstream,
//   gateway  through aicloud's gateway (auth, RBAC, limits, budget, routing, usage record),
//   nginx    through an nginx reverse proxy (keep-alive upstream), started here as a child
//            process with a generated config in a temp dir (as user nobody when run as root),
// in interleaved rounds, and reporting p50/p99/p99.9 and the latency each proxy adds.
//
//   gateway_bench --rate 5000 --seconds 5 --rounds 4 [--connections 64] [--json out.json]
//                 [--worker-path] [--stub-workers] [--proxy-threads N] [--only TARGET]
//                 [--pin LOADGEN,STUB,PROXY] [--usage log|null] [--prompt-bytes N]
//                 [--stub-usage header|body] [--slice MS] [--nginx-log off|buffered] [--control]
//                 [--gateway-process path/to/aicloud]
//
// --gateway-process AICLOUD adds "gw-process": the same gateway run as `AICLOUD gateway
// --upstreams` in a process of its own, as nginx runs (the "gateway" target shares this process
// with the load generator and the stub: its memory, allocator and page tables).
// --control adds a fifth target, "nginx-b": a second nginx, configured as the first, reported
// against it as the gateway is (nginx-b added / nginx added). Two identical proxies differ only by
// the machine's noise, so its spread is what a ratio of this benchmark can be trusted to: with
// --only nginx --control the run has the bar's shape (direct and two proxies in turn).
// --nginx-log buffered gives nginx a per-request access log in the combined format, buffered as
// production configurations do (buffer=64k flush=1s; Debian's default config logs every request,
// unbuffered), to stand for the gateway's per-request usage record; the default is off.
// --worker-path adds a fourth target, "gw-worker": a second gateway with fast_path off, so every
// request takes a worker thread and a blocking upstream client (the gateway before the fast path).
// The stub answers a fixed chat.completion body (with usage) from an http::Server, inline on its
// I/O thread (--stub-workers: through its worker pool, as the stub did before). Like aicloud's
// engine, it repeats the usage in an x-aicloud-usage header, which the gateway charges without
// parsing the body; --stub-usage body leaves the header out, as an engine of another make would,
// and the gateway reads the body. --proxy-threads
// gives the gateways that many I/O threads and nginx that many worker processes; --only runs one
// target besides direct (for profiling it), or those listed ("--only gw-process,nginx"). --pin puts the load generator, the stub's threads and
// the proxies (the gateways' threads and nginx) each on its own CPU, so that on a machine with
// cores to spare none of them waits for another's time slice (with --proxy-threads N > 1 the
// proxies still share that one CPU, and nginx's CPU column counts its master only).
// --prompt-bytes pads the user message to N bytes (what a RAG prompt sends; default: a short
// question, ~100-byte body). --slice MS runs each round's targets at once instead of one after
// another: time is dealt out in slices of MS milliseconds, target by target, each request going
// to the target whose slice it was scheduled in, so every target is served at the full --rate
// during its slices and a stall of a shared machine falls on all of them alike (with --pin, the
// proxies share their CPU only for the last answers of a slice). A target's direct CPU column
// is then the stub's work for every target. Latency is measured from each request's scheduled
// send time (open loop: a late send counts against the system, so coordinated omission does not
// hide queueing). Each round's line ends with how long the kernel's own threads ran while that
// target was measured ("kernel 7.3 ms (kdamond 6)": the total, and the thread that ran longest):
// on a small VM one of them holding a CPU for milliseconds (DAMON's memory reclaim, kdamond)
// delays whatever thread of the path was queued on that CPU, which the round's p99 then shows.
// Results: bench/RESULTS.md section 8.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <spawn.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "gateway/gateway.h"
#include "http/usage_header.h"

extern char** environ;

namespace {

using Clock = std::chrono::steady_clock;
using namespace aicloud;

struct Flags {
  double rate = 5000;
  double seconds = 5;
  double warmup = 1;
  int rounds = 4;
  int connections = 64;
  std::string nginx = "/usr/sbin/nginx";
  std::string json_out;
  std::string policy = "score";
  bool limits = true;  // give the key rpm/tpm limits and a budget (the full admission path)
  bool worker_path = false;
  bool stub_workers = false;
  std::string only;  // run this target alone (for profiling), besides direct
  int proxy_threads = 1;  // the gateway's I/O threads and nginx's worker processes
  std::string usage = "log";  // the gateways' usage sink: log (JSON lines to /dev/null) or null
  std::string nginx_log = "off";  // nginx's access log: off, or buffered (a file in its directory)
  bool control = false;           // a second nginx, "nginx-b", measured against the first
  std::string gateway_process;    // the aicloud binary: adds "gw-process", the gateway in its own process
  std::vector<int> pin;   // CPUs of the load generator, the stub and the proxies; empty: unpinned
  size_t prompt_bytes = 0;  // pad the user message to this many bytes (a RAG-sized prompt)
  std::string stub_usage = "header";  // header: usage also in x-aicloud-usage, as aicloud's engine; body: only in the body
  double slice_ms = 0;  // > 0: each round runs every target at once, dealing them slices of this many ms in turn
};

// Binds the calling thread to `cpu`; threads and processes it starts afterwards inherit it.
void PinThisThread(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  if (int err = pthread_setaffinity_np(pthread_self(), sizeof(set), &set); err != 0) {
    std::fprintf(stderr, "error: cannot pin to CPU %d: %s\n", cpu, std::strerror(err));
    std::exit(1);
  }
}

const char kStubBody[] =
    R"({"id":"chatcmpl-bench","object":"chat.completion","created":1700000000,"model":"m",)"
    R"("choices":[{"index":0,"message":{"role":"assistant","content":"Hello! How can I help you today?"},)"
    R"("logprobs":null,"finish_reason":"stop"}],"usage":{"prompt_tokens":12,"completion_tokens":9,"total_tokens":21}})";

// One keep-alive connection of the load generator.
struct Conn {
  int fd = -1;
  bool busy = false;
  Clock::time_point scheduled;
  std::string in;
};

int Connect(uint16_t port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 && errno != EINPROGRESS) {
    close(fd);
    return -1;
  }
  return fd;
}

// Whether a connection Connect began is established (waits up to a second).
bool Connected(int fd) {
  if (fd < 0) return false;
  pollfd p{fd, POLLOUT, 0};
  if (poll(&p, 1, 1000) != 1) return false;
  int err = 0;
  socklen_t len = sizeof(err);
  return getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) == 0 && err == 0;
}

// Length of a complete HTTP response at the start of `s` (Content-Length framing), or 0.
size_t CompleteResponse(const std::string& s) {
  size_t end = s.find("\r\n\r\n");
  if (end == std::string::npos) return 0;
  size_t len = 0;
  for (size_t p = 0; p < end;) {
    size_t eol = s.find("\r\n", p);
    std::string line = s.substr(p, eol - p);
    p = eol + 2;
    if (line.size() > 15 && strncasecmp(line.c_str(), "content-length:", 15) == 0) len = std::stoul(line.substr(15));
  }
  return s.size() >= end + 4 + len ? end + 4 + len : 0;
}

struct Result {
  std::vector<double> lat_us;
  int64_t errors = 0;
  int64_t late = 0;  // sends that found no idle connection at their scheduled time
  int64_t sent = 0;
  // CPU time the kernel's own threads ran while this target was measured, by thread name without
  // its instance suffix ("kdamond", "kworker", "ksoftirqd"): time they may have taken from a thread
  // of the target's path that was queued behind them.
  std::map<std::string, int64_t> kernel_ns;
};

// The kernel's own threads (children of kthreadd, pid 2, outside a PID namespace: memory reclaim,
// softirqs, workqueues) present at construction (each Run makes its own, so workers started since
// are counted), whose run time is read from /proc/PID/schedstat through descriptors kept open, so a
// sample costs one pread per thread (~60 on a small VM). On a shared 2-vCPU machine one of them
// holding a CPU for milliseconds delays whatever was queued on that CPU; the benchmark reports how
// long they ran in each target's measured time, so such a stall can be told from the target's own.
class KernelThreads {
 public:
  KernelThreads() {
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator("/proc", ec)) {
      const std::string pid = e.path().filename();
      if (pid.empty() || pid.find_first_not_of("0123456789") != std::string::npos) continue;
      std::ifstream stat(e.path() / "stat");
      std::string line;
      if (!std::getline(stat, line)) continue;
      // "PID (COMM) STATE PPID ...": COMM may hold spaces and parentheses; the last ')' ends it.
      const size_t lp = line.find('('), rp = line.rfind(')');
      if (lp == std::string::npos || rp == std::string::npos || rp < lp) continue;
      int ppid = -1;
      char state = 0;
      if (std::sscanf(line.c_str() + rp + 1, " %c %d", &state, &ppid) != 2 || (ppid != 2 && pid != "2")) continue;
      const int fd = open_schedstat(e.path() / "schedstat");
      if (fd < 0) continue;
      std::string name = line.substr(lp + 1, rp - lp - 1);
      name = name.substr(0, name.find_first_of("/.:-"));  // "kworker/u8:2-events" -> "kworker"
      while (!name.empty() && std::isdigit(static_cast<unsigned char>(name.back()))) name.pop_back();
      threads_.push_back({fd, name.empty() ? "?" : name});
    }
  }
  ~KernelThreads() {
    for (const Thread& t : threads_) close(t.fd);
  }
  KernelThreads(const KernelThreads&) = delete;
  KernelThreads& operator=(const KernelThreads&) = delete;

  // Run time in ns of each thread (a thread that exited reads as its last value).
  void Sample(std::vector<int64_t>* ns) {
    last_.resize(threads_.size());
    char buf[96];
    for (size_t i = 0; i < threads_.size(); ++i) {
      const ssize_t n = pread(threads_[i].fd, buf, sizeof(buf) - 1, 0);
      if (n <= 0) continue;
      buf[n] = 0;
      last_[i] = std::strtoll(buf, nullptr, 10);
    }
    *ns = last_;
  }
  // Adds `after - before` per thread to `out`, by thread name.
  void AddDelta(const std::vector<int64_t>& before, const std::vector<int64_t>& after,
                std::map<std::string, int64_t>* out) const {
    for (size_t i = 0; i < threads_.size() && i < before.size() && i < after.size(); ++i) {
      if (after[i] > before[i]) (*out)[threads_[i].name] += after[i] - before[i];
    }
  }

 private:
  struct Thread {
    int fd;
    std::string name;
  };
  static int open_schedstat(const std::filesystem::path& p) { return ::open(p.c_str(), O_RDONLY | O_CLOEXEC); }
  std::vector<Thread> threads_;
  std::vector<int64_t> last_;  // each thread's last value read
};

int64_t Total(const std::map<std::string, int64_t>& by_name) {
  int64_t total = 0;
  for (const auto& [name, ns] : by_name) total += ns;
  return total;
}

// Sends `rate` requests/s for `seconds` (after `warmup`, whose latencies are not recorded) to
// the targets on 127.0.0.1 (`ports[t]`, `requests[t]`, `connections` keep-alive connections each).
// With one target it takes every request. With several, time is cut into slices of `slice`
// seconds dealt to the targets in turn, and a request goes to the target whose slice it was
// scheduled in: each target still sees `rate` while it is served, and a stall of the machine
// falls on every target alike instead of on one target's round.
// The kernel's threads' run time is charged to the target being measured when it ran (`kernel`,
// sampled at every slice boundary after the warm-up).
std::vector<Result> Run(const std::vector<uint16_t>& ports, const std::vector<std::string>& requests, double rate,
                        double seconds, double warmup, int connections, double slice) {
  KernelThreads kernel;
  const size_t targets = ports.size();
  std::vector<Result> res(targets);
  int ep = epoll_create1(0);
  std::vector<Conn> conns(targets * static_cast<size_t>(connections));
  std::vector<std::vector<int>> idle(targets);
  auto target_of = [&](size_t i) { return i / static_cast<size_t>(connections); };
  auto watch = [&](size_t i) {
    conns[i].fd = Connect(ports[target_of(i)]);
    if (conns[i].fd < 0) return;
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u32 = static_cast<uint32_t>(i);
    epoll_ctl(ep, EPOLL_CTL_ADD, conns[i].fd, &ev);
  };
  for (size_t i = 0; i < conns.size(); ++i) watch(i);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // connects complete
  for (size_t i = conns.size(); i-- > 0;) idle[target_of(i)].push_back(static_cast<int>(i));
  std::vector<std::deque<Clock::time_point>> backlog(targets);
  const auto t0 = Clock::now();
  const auto t_end = t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(warmup + seconds));
  const auto t_measure = t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(warmup));
  const auto gap = std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(1.0 / rate));
  const auto slice_len = std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(slice));
  auto slice_target = [&](Clock::time_point t) {
    return targets == 1 ? size_t{0} : static_cast<size_t>((t - t0) / slice_len) % targets;
  };
  auto next = t0;
  int outstanding = 0;
  size_t queued = 0;
  // Kernel threads' time: sampled when the warm-up ends, at each slice boundary, and at the end.
  std::vector<int64_t> kernel_before, kernel_now;
  bool kernel_started = false;
  int64_t kernel_slice = 0;  // index of the slice the last sample began
  auto slice_index = [&](Clock::time_point t) { return targets == 1 ? int64_t{0} : static_cast<int64_t>((t - t0) / slice_len); };
  auto sample_kernel = [&](Clock::time_point now, bool last) {
    if (!kernel_started) {
      if (now < t_measure) return;
      kernel.Sample(&kernel_before);
      kernel_started = true;
      kernel_slice = slice_index(now);
      return;
    }
    if (!last && slice_index(now) == kernel_slice) return;
    kernel.Sample(&kernel_now);
    kernel.AddDelta(kernel_before, kernel_now,
                    &res[targets == 1 ? 0 : static_cast<size_t>(kernel_slice % static_cast<int64_t>(targets))].kernel_ns);
    kernel_before.swap(kernel_now);
    kernel_slice = slice_index(now);
  };
  char buf[65536];
  epoll_event events[128];
  auto send_on = [&](int i, Clock::time_point sched) {
    Conn& c = conns[static_cast<size_t>(i)];
    c.busy = true;
    c.scheduled = sched;
    c.in.clear();
    const std::string& request = requests[target_of(static_cast<size_t>(i))];
    ssize_t n = send(c.fd, request.data(), request.size(), MSG_NOSIGNAL);
    const size_t t = target_of(static_cast<size_t>(i));
    if (n != static_cast<ssize_t>(request.size())) {
      // One error; no answer will come on a connection that took part of a request, or none:
      // a fresh one takes its place.
      ++res[t].errors;
      epoll_ctl(ep, EPOLL_CTL_DEL, c.fd, nullptr);
      close(c.fd);
      c.busy = false;
      watch(static_cast<size_t>(i));
      if (Connected(c.fd)) idle[t].push_back(i);  // else the target has one connection fewer
      return;
    }
    ++res[t].sent;
    ++outstanding;
  };
  for (;;) {
    auto now = Clock::now();
    while (next <= now && next < t_end) {
      backlog[slice_target(next)].push_back(next);
      ++queued;
      next += gap;
    }
    for (size_t t = 0; t < targets; ++t) {
      while (!backlog[t].empty() && !idle[t].empty()) {
        if (backlog[t].front() + std::chrono::microseconds(200) < now) ++res[t].late;
        int i = idle[t].back();
        idle[t].pop_back();
        send_on(i, backlog[t].front());
        backlog[t].pop_front();
        --queued;
      }
    }
    sample_kernel(now, false);  // after the sends due now: a sample does not delay them
    if (next >= t_end && queued == 0 && outstanding == 0) break;
    if (now > t_end + std::chrono::seconds(10)) {  // stuck: count what is left as errors
      for (size_t t = 0; t < targets; ++t) res[t].errors += static_cast<int64_t>(backlog[t].size());
      for (size_t i = 0; i < conns.size(); ++i) res[target_of(i)].errors += conns[i].busy ? 1 : 0;
      break;
    }
    // Sleep until the next send (nanosecond timeout, never a busy poll: on two cores a spinning
    // load generator would steal the CPU the systems under test need).
    timespec ts{0, 0};
    if (queued == 0) {
      int64_t until_ns = next >= t_end ? 5'000'000
                                       : std::chrono::duration_cast<std::chrono::nanoseconds>(next - Clock::now()).count();
      until_ns = std::max<int64_t>(0, until_ns);
      ts.tv_sec = until_ns / 1'000'000'000;
      ts.tv_nsec = until_ns % 1'000'000'000;
    } else {  // requests wait for a free connection: wait for one to answer, or the next send
      int64_t until_ns = 100'000;
      if (next < t_end) {
        until_ns = std::clamp<int64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(next - Clock::now()).count(), 0, until_ns);
      }
      ts.tv_nsec = until_ns;
    }
    int n = epoll_pwait2(ep, events, 128, &ts, nullptr);
    if (n < 0 && errno == ENOSYS) {  // kernels before 5.11, and valgrind 3.19: millisecond waits
      n = epoll_wait(ep, events, 128, static_cast<int>((ts.tv_sec * 1'000'000'000 + ts.tv_nsec + 999'999) / 1'000'000));
    }
    for (int k = 0; k < n; ++k) {
      const size_t i = events[k].data.u32;
      Conn& c = conns[i];
      Result& r = res[target_of(i)];
      for (;;) {
        ssize_t got = recv(c.fd, buf, sizeof(buf), 0);
        if (got > 0) {
          c.in.append(buf, static_cast<size_t>(got));
          continue;
        }
        if (got == 0 || (errno != EAGAIN && errno != EWOULDBLOCK)) {  // closed: reconnect
          epoll_ctl(ep, EPOLL_CTL_DEL, c.fd, nullptr);
          close(c.fd);
          if (c.busy) {
            ++r.errors;
            --outstanding;
            c.busy = false;
          }
          watch(i);
          idle[target_of(i)].push_back(static_cast<int>(i));
        }
        break;
      }
      if (c.busy) {
        size_t len = CompleteResponse(c.in);
        if (len > 0) {
          auto done = Clock::now();
          if (c.in.compare(0, 12, "HTTP/1.1 200") != 0) ++r.errors;
          else if (c.scheduled >= t_measure) {
            r.lat_us.push_back(std::chrono::duration<double, std::micro>(done - c.scheduled).count());
          }
          c.busy = false;
          --outstanding;
          idle[target_of(i)].push_back(static_cast<int>(i));
        }
      }
    }
  }
  if (kernel_started) sample_kernel(Clock::now(), true);
  for (Conn& c : conns) close(c.fd);
  close(ep);
  return res;
}

// Thread ids of process `pid` ("self" for this one).
std::vector<std::string> ThreadsOf(const std::string& pid) {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("/proc/" + pid + "/task", ec)) out.push_back(e.path().filename());
  std::sort(out.begin(), out.end());
  return out;
}

// CPU time in ns the given threads of `pid` have run (first field of their schedstat).
int64_t CpuNs(const std::string& pid, const std::vector<std::string>& tids) {
  int64_t total = 0;
  for (const std::string& t : tids) {
    std::ifstream in("/proc/" + pid + "/task/" + t + "/schedstat");
    int64_t ns = 0;
    if (in >> ns) total += ns;
  }
  return total;
}

double Pct(std::vector<double>& v, double p) {
  if (v.empty()) return NAN;
  size_t k = std::min(v.size() - 1, static_cast<size_t>(std::ceil(p / 100.0 * static_cast<double>(v.size())) - 1));
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(k), v.end());
  return v[k];
}

uint16_t FreePort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  socklen_t len = sizeof(a);
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  close(fd);
  return ntohs(a.sin_port);
}

// Runs `args` and waits until something listens on 127.0.0.1:port (5 s at most); returns its pid,
// or 0 with *why saying so and holding what `log` says. log_fd >= 0: its stdout and stderr.
pid_t SpawnListening(std::vector<std::string> args, uint16_t port, const std::string& log, std::string* why,
                     int log_fd = -1) {
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  if (log_fd >= 0) {
    posix_spawn_file_actions_adddup2(&actions, log_fd, 1);
    posix_spawn_file_actions_adddup2(&actions, log_fd, 2);
  }
  pid_t pid = 0;
  const int spawned = posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (spawned != 0) {
    *why = "cannot start " + args[0];
    return 0;
  }
  for (int i = 0; i < 100; ++i) {  // wait until it listens
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    bool up = connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0;
    close(fd);
    if (up) return pid;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  kill(pid, SIGKILL);
  waitpid(pid, nullptr, 0);
  std::ifstream in(log);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  *why = args[0] + " did not start: " + text;
  return 0;
}

// Starts nginx proxying 127.0.0.1:port -> stub; returns its pid (0 when it cannot run).
pid_t StartNginx(const Flags& f, uint16_t stub_port, uint16_t port, std::string* dir_out, std::string* why) {
  if (access(f.nginx.c_str(), X_OK) != 0) {
    *why = f.nginx + " not found (scripts/setup installs nginx-light)";
    return 0;
  }
  char tmpl[] = "/tmp/aicloud-gw-bench-nginx.XXXXXX";
  std::string dir = mkdtemp(tmpl);
  chmod(dir.c_str(), 0777);
  *dir_out = dir;
  std::ofstream conf(dir + "/nginx.conf");
  // One worker runs without a master (one process, like the gateway's one I/O thread); several
  // need the master, and reuseport spreads the connections over them.
  const bool several = f.proxy_threads > 1;
  conf << "worker_processes " << f.proxy_threads << ";\ndaemon off;\nmaster_process " << (several ? "on" : "off")
       << ";\npid " << dir << "/nginx.pid;\n"
       << "error_log " << dir << "/error.log warn;\n"
       << "events { worker_connections 4096; }\n"
       << "http {\n"
       << (f.nginx_log == "buffered" ? "  access_log " + dir + "/access.log combined buffer=64k flush=1s;\n"
                                     : std::string("  access_log off;\n"))
       << "  keepalive_requests 1000000;\n  keepalive_timeout 300s;\n"
       // Request bodies stay in memory (the default 16 KiB buffer sends a RAG-sized body to a
       // temp file, which no operator proxying LLM traffic would leave so).
       << "  client_body_buffer_size 1m;\n  client_max_body_size 16m;\n"
       << "  client_body_temp_path " << dir << "/body;\n  proxy_temp_path " << dir << "/proxy;\n"
       << "  fastcgi_temp_path " << dir << "/fcgi;\n  uwsgi_temp_path " << dir << "/uwsgi;\n"
       << "  scgi_temp_path " << dir << "/scgi;\n"
       << "  upstream stub { server 127.0.0.1:" << stub_port << "; keepalive 256; }\n"
       << "  server {\n    listen 127.0.0.1:" << port << (several ? " reuseport" : "") << ";\n"
       << "    location / {\n      proxy_pass http://stub;\n      proxy_http_version 1.1;\n"
       << "      proxy_set_header Connection \"\";\n    }\n  }\n}\n";
  conf.close();
  std::vector<std::string> args;
  if (geteuid() == 0) {  // never run the proxy as root: drop to nobody
    args = {"/usr/bin/setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", f.nginx};
  } else {
    args = {f.nginx};
  }
  for (std::string a : {std::string("-p"), dir, std::string("-c"), dir + "/nginx.conf", std::string("-e"), dir + "/error.log"}) {
    args.push_back(std::move(a));
  }
  const pid_t pid = SpawnListening(args, port, dir + "/error.log", why);
  if (pid == 0) std::filesystem::remove_all(dir);
  return pid;
}

// The aicloud gateway of the in-process target, as its own process (`aicloud gateway
// --upstreams`): the same route, key, limits, budgets, policy, I/O threads and usage log, from a
// generated upstreams file. Returns its pid (0 when it cannot run).
pid_t StartGatewayProcess(const Flags& f, uint16_t stub_port, uint16_t port, std::string* dir_out, std::string* why) {
  if (access(f.gateway_process.c_str(), X_OK) != 0) {
    *why = f.gateway_process + " not found (build the aicloud target)";
    return 0;
  }
  char tmpl[] = "/tmp/aicloud-gw-bench-process.XXXXXX";
  std::string dir = mkdtemp(tmpl);
  *dir_out = dir;
  std::ofstream up(dir + "/upstreams.yaml");
  up << "models:\n  - model: m\n    tenant: bench\n    price: {prompt: 0.1, completion: 0.2}\n"
     << "    replicas: [{url: 127.0.0.1:" << stub_port << ", id: stub}]\n";
  if (f.limits) {  // as the in-process gateway's caller
    up << "tenants:\n  bench: {rpm: 100000000, budget: {cost: 1000000000000, period: 1d}}\n"
       << "keys:\n  - {key: sk-bench, id: bench, tenant: bench, rpm: 100000000, tpm: 1000000000000,\n"
       << "     budget: {tokens: 1000000000000, period: 1d}}\n";
  } else {
    up << "keys:\n  - {key: sk-bench, id: bench, tenant: bench}\n";
  }
  up.close();
  std::vector<std::string> args = {f.gateway_process, "gateway", "--upstreams", dir + "/upstreams.yaml",
                                   "--listen", "127.0.0.1:" + std::to_string(port), "--policy", f.policy,
                                   "--threads", std::to_string(f.proxy_threads), "--workers", "8",
                                   "--usage-log", f.usage == "null" ? "none" : "/dev/null"};
  // Its log (start-up lines, errors) goes to a file, read back when it does not start.
  const int log_fd = open((dir + "/gateway.log").c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  const pid_t pid = SpawnListening(args, port, dir + "/gateway.log", why, log_fd);
  if (log_fd >= 0) close(log_fd);
  if (pid == 0) std::filesystem::remove_all(dir);
  return pid;
}

int Main(int argc, char** argv) {
  Flags f;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto val = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "error: %s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--rate") f.rate = std::stod(val());
    else if (a == "--seconds") f.seconds = std::stod(val());
    else if (a == "--warmup") f.warmup = std::stod(val());
    else if (a == "--rounds") f.rounds = std::stoi(val());
    else if (a == "--connections") f.connections = std::stoi(val());
    else if (a == "--nginx") f.nginx = val();
    else if (a == "--json") f.json_out = val();
    else if (a == "--policy") f.policy = val();
    else if (a == "--no-limits") f.limits = false;
    else if (a == "--worker-path") f.worker_path = true;
    else if (a == "--stub-workers") f.stub_workers = true;
    else if (a == "--only") f.only = val();
    else if (a == "--proxy-threads") f.proxy_threads = std::max(1, std::stoi(val()));
    else if (a == "--usage") f.usage = val();
    else if (a == "--control") f.control = true;
    else if (a == "--gateway-process") f.gateway_process = val();
    else if (a == "--nginx-log") {
      f.nginx_log = val();
      if (f.nginx_log != "off" && f.nginx_log != "buffered") {
        std::fprintf(stderr, "error: --nginx-log wants off or buffered (got \"%s\")\n", f.nginx_log.c_str());
        return 2;
      }
    }
    else if (a == "--prompt-bytes") f.prompt_bytes = static_cast<size_t>(std::stoul(val()));
    else if (a == "--stub-usage") f.stub_usage = val();
    else if (a == "--slice") {
      f.slice_ms = std::stod(val());
      if (!(f.slice_ms >= 1)) {
        std::fprintf(stderr, "error: --slice wants milliseconds >= 1 (got %s)\n", argv[i]);
        return 2;
      }
    }
    else if (a == "--pin") {
      std::string v = val();
      for (size_t p = 0; p <= v.size();) {
        size_t comma = std::min(v.find(',', p), v.size());
        f.pin.push_back(std::stoi(v.substr(p, comma - p)));
        p = comma + 1;
      }
      if (f.pin.size() != 3) {
        std::fprintf(stderr, "error: --pin wants three CPUs: LOADGEN,STUB,PROXY (got \"%s\")\n", v.c_str());
        return 2;
      }
    } else {
      std::fprintf(stderr,
                   "usage: gateway_bench [--rate R] [--seconds S] [--warmup S] [--rounds N] [--connections C]\n"
                   "                     [--nginx PATH] [--policy P] [--no-limits] [--json FILE]\n"
                   "                     [--worker-path] [--stub-workers] [--only TARGET]\n"
                   "                     [--proxy-threads N] [--pin LOADGEN,STUB,PROXY] [--usage log|null]\n"
                   "                     [--prompt-bytes N] [--stub-usage header|body] [--slice MS]\n"
                   "                     [--nginx-log off|buffered] [--control] [--gateway-process AICLOUD]\n");
      return 2;
    }
  }
  if (f.stub_usage != "header" && f.stub_usage != "body") {
    std::fprintf(stderr, "error: --stub-usage is header or body (got \"%s\")\n", f.stub_usage.c_str());
    return 2;
  }
  signal(SIGPIPE, SIG_IGN);

  // The stub upstream.
  if (!f.pin.empty()) PinThisThread(f.pin[1]);
  http::Router stub_router;
  const bool usage_header = f.stub_usage == "header";
  stub_router.Add("POST", "/v1/chat/completions", [usage_header](http::Request&) {
    http::Response r = http::Response::Text(200, kStubBody, "application/json");
    if (usage_header) r.headers.emplace_back(http::kUsageHeader, http::UsageHeaderValue({12, 9}));  // kStubBody's usage
    return r;
  });
  auto stub = f.stub_workers
                  ? http::Server::Start({.io_threads = 1, .worker_threads = 2},
                                        [&](http::Request& r) { return stub_router.Dispatch(r); })
                  : http::Server::Start({.io_threads = 1, .worker_threads = 2},
                                        [&](http::Request& r, http::Responder respond) {
                                          respond(stub_router.Dispatch(r));  // a fixed answer: no need for a worker
                                        });
  if (!stub.ok()) {
    std::fprintf(stderr, "error: stub: %s\n", stub.status().message().c_str());
    return 1;
  }
  const uint16_t stub_port = (*stub)->port();
  std::vector<std::string> stub_threads, main_thread = {std::to_string(gettid())};
  for (const std::string& t : ThreadsOf("self")) {
    if (t != main_thread[0]) stub_threads.push_back(t);
  }
  // The threads each target runs on, for its CPU time per request.
  std::vector<std::string> before = ThreadsOf("self");
  auto started_since = [&before] {
    std::vector<std::string> now = ThreadsOf("self"), added;
    std::set_difference(now.begin(), now.end(), before.begin(), before.end(), std::back_inserter(added));
    before = std::move(now);
    return added;
  };

  // The gateway, in this process, with one replica (the stub).
  if (!f.pin.empty()) PinThisThread(f.pin[2]);
  gateway::StaticDirectory dir;
  gateway::Route route;
  route.deployment = route.model = route.base_model = "m";
  route.tenant = "bench";
  route.prompt_price_per_m = 0.1;
  route.completion_price_per_m = 0.2;
  route.replicas = {{"stub", "127.0.0.1:" + std::to_string(stub_port), true}};
  (void)dir.Upsert(route);
  gateway::StaticKeys keys;
  gateway::Caller caller{.key_id = "bench", .tenant = "bench"};
  if (f.limits) {
    caller.key_limits = {.rpm = 100'000'000, .tpm = 1'000'000'000'000, .budget_tokens = 1'000'000'000'000, .budget_period_s = 86400};
    caller.tenant_limits = {.rpm = 100'000'000, .budget_cost = 1e12, .budget_period_s = 86400};
  }
  (void)keys.Add("sk-bench", caller);
  std::FILE* devnull = std::fopen("/dev/null", "w");
  gateway::LogUsageSink log_sink(devnull);
  gateway::NullUsageSink null_sink;
  gateway::UsageSink& sink = f.usage == "null" ? static_cast<gateway::UsageSink&>(null_sink) : log_sink;
  std::vector<std::string> sink_threads = started_since();
  gateway::GatewayOptions o;
  o.policy = f.policy;
  auto gw = gateway::Gateway::Create({.directory = &dir, .authenticate = keys.AsAuthenticator(), .auth_epoch = keys.AsEpoch(), .usage = &sink}, o);
  if (!gw.ok()) {
    std::fprintf(stderr, "error: gateway: %s\n", gw.status().message().c_str());
    return 1;
  }
  auto gws = gateway::GatewayServer::Start(gw->get(), {.io_threads = f.proxy_threads, .worker_threads = 8}, 8);
  if (!gws.ok()) {
    std::fprintf(stderr, "error: gateway server: %s\n", gws.status().message().c_str());
    return 1;
  }
  std::vector<std::string> gateway_threads = started_since();
  gateway_threads.insert(gateway_threads.end(), sink_threads.begin(), sink_threads.end());
  // The same gateway with every request on a worker (the path before the fast path).
  std::unique_ptr<gateway::Gateway> gw_worker;
  std::unique_ptr<gateway::GatewayServer> gws_worker;
  if (f.worker_path) {
    gateway::GatewayOptions wo = o;
    wo.fast_path = false;
    auto g = gateway::Gateway::Create({.directory = &dir, .authenticate = keys.AsAuthenticator(), .auth_epoch = keys.AsEpoch(), .usage = &sink}, wo);
    if (!g.ok()) return 1;
    gw_worker = std::move(*g);
    auto s = gateway::GatewayServer::Start(gw_worker.get(), {.io_threads = f.proxy_threads, .worker_threads = 8}, 8);
    if (!s.ok()) return 1;
    gws_worker = std::move(*s);
  }
  std::vector<std::string> worker_threads = started_since();
  worker_threads.insert(worker_threads.end(), sink_threads.begin(), sink_threads.end());

  std::string nginx_dir, why;
  const uint16_t nginx_port = FreePort();
  pid_t nginx = StartNginx(f, stub_port, nginx_port, &nginx_dir, &why);
  if (nginx == 0) std::fprintf(stderr, "nginx: skipped: %s\n", why.c_str());
  std::string gw_process_dir;
  const uint16_t gw_process_port = FreePort();
  pid_t gw_process = 0;
  if (!f.gateway_process.empty()) {
    gw_process = StartGatewayProcess(f, stub_port, gw_process_port, &gw_process_dir, &why);
    if (gw_process == 0) {
      std::fprintf(stderr, "error: gw-process: %s\n", why.c_str());
      if (nginx != 0) {
        kill(nginx, SIGTERM);
        waitpid(nginx, nullptr, 0);
        std::filesystem::remove_all(nginx_dir);
      }
      return 1;
    }
  }
  std::string nginx_b_dir;
  const uint16_t nginx_b_port = FreePort();
  pid_t nginx_b = 0;
  if (f.control && nginx != 0) {
    nginx_b = StartNginx(f, stub_port, nginx_b_port, &nginx_b_dir, &why);
    if (nginx_b == 0) std::fprintf(stderr, "nginx-b: skipped: %s\n", why.c_str());
  }
  if (!f.pin.empty()) PinThisThread(f.pin[0]);

  std::string content = "Hello, who are you?";
  while (content.size() < f.prompt_bytes) content += " The context says the GPU has 80 GiB of memory.";
  if (f.prompt_bytes > 0) content.resize(f.prompt_bytes);
  const std::string body = nlohmann::json{{"model", "m"}, {"messages", {{{"role", "user"}, {"content", content}}}}, {"max_tokens", 16}}.dump();
  auto request = [&](uint16_t port) {
    return "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:" + std::to_string(port) +
           "\r\nAuthorization: Bearer sk-bench\r\nContent-Type: application/json\r\nContent-Length: " +
           std::to_string(body.size()) + "\r\n\r\n" + body;
  };
  struct Target {
    std::string name;
    uint16_t port;
    std::string pid;                  // whose threads serve it ("self": this process)
    std::vector<std::string> threads;  // empty: all of pid's
    Result all;
    int64_t cpu_ns = 0;  // CPU time of those threads during the rounds
    std::vector<std::array<double, 2>> rounds;  // p50, p99 of each round
    std::vector<int64_t> round_kernel_ns;        // kernel threads' run time in each round's measured time
  };
  std::vector<Target> targets = {{"direct", stub_port, "self", stub_threads, {}},
                                 {"gateway", (*gws)->port(), "self", gateway_threads, {}}};
  if (nginx != 0) targets.push_back({"nginx", nginx_port, std::to_string(nginx), {}, {}});
  if (gws_worker) targets.push_back({"gw-worker", gws_worker->port(), "self", worker_threads, {}});
  if (nginx_b != 0) targets.push_back({"nginx-b", nginx_b_port, std::to_string(nginx_b), {}, {}});
  if (gw_process != 0) targets.push_back({"gw-process", gw_process_port, std::to_string(gw_process), {}, {}});
  if (!f.only.empty()) {  // "gateway", or a list: "gw-process,nginx"
    std::set<std::string> keep = {"direct"};
    for (size_t p = 0; p <= f.only.size();) {
      const size_t comma = std::min(f.only.find(',', p), f.only.size());
      keep.insert(f.only.substr(p, comma - p));
      p = comma + 1;
    }
    for (const std::string& name : keep) {
      if (std::none_of(targets.begin(), targets.end(), [&](const Target& t) { return t.name == name; })) {
        std::fprintf(stderr, "error: --only %s: no such target here (gateway, nginx, gw-worker with --worker-path, "
                             "gw-process with --gateway-process)\n", name.c_str());
        for (pid_t pid : {nginx, nginx_b, gw_process}) {
          if (pid != 0) kill(pid, SIGTERM);
        }
        for (pid_t pid : {nginx, nginx_b, gw_process}) {
          if (pid != 0) waitpid(pid, nullptr, 0);
        }
        for (const std::string& d : {nginx_dir, nginx_b_dir, gw_process_dir}) {
          if (!d.empty()) std::filesystem::remove_all(d);
        }
        return 2;
      }
    }
    if (keep.contains("nginx")) keep.insert("nginx-b");  // the control goes with nginx
    std::erase_if(targets, [&](const Target& t) { return !keep.contains(t.name); });
  }

#ifdef AICLOUD_PGO_USE
  constexpr const char* kBuild = "profile-guided (scripts/build-pgo)";
#else
  constexpr const char* kBuild = "plain";
#endif
  std::printf("gateway_bench: %s build, %.0f req/s, %d connections, %d rounds x %.1f s (+%.1f s warm-up) per target, policy %s, "
              "limits %s, proxy threads %d, stub %s%s\n",
              kBuild, f.rate, f.connections, f.rounds, f.seconds, f.warmup, f.policy.c_str(), f.limits ? "on" : "off",
              f.proxy_threads, f.stub_workers ? "workers" : "inline",
              f.pin.empty() ? "" : (", pinned to CPUs " + std::to_string(f.pin[0]) + "," + std::to_string(f.pin[1]) + "," +
                                    std::to_string(f.pin[2])).c_str());
  // One round of the targets in `order`, all at once in slices (--slice) or one after another.
  auto record = [&](int r, Target& t, const Result& x, int64_t cpu) {
    t.cpu_ns += cpu;
    t.all.sent += x.sent;
    std::vector<double> copy = x.lat_us;
    t.rounds.push_back({Pct(copy, 50), Pct(copy, 99)});
    t.round_kernel_ns.push_back(Total(x.kernel_ns));
    for (const auto& [name, ns] : x.kernel_ns) t.all.kernel_ns[name] += ns;
    // The kernel thread that ran longest, if any did for 1 ms or more.
    std::string top;
    auto longest = std::max_element(x.kernel_ns.begin(), x.kernel_ns.end(),
                                    [](const auto& a, const auto& b) { return a.second < b.second; });
    if (longest != x.kernel_ns.end() && longest->second >= 1'000'000) {
      top = " (" + longest->first + " " + std::to_string(longest->second / 1'000'000) + ")";
    }
    std::printf("  round %d %-9s n=%zu p50 %7.1f us  p99 %7.1f us  cpu %5.1f us/req  errors %lld late %lld  kernel %5.1f ms%s\n",
                r + 1, t.name.c_str(), x.lat_us.size(), t.rounds.back()[0], t.rounds.back()[1],
                x.sent > 0 ? static_cast<double>(cpu) / 1e3 / static_cast<double>(x.sent) : NAN,
                static_cast<long long>(x.errors), static_cast<long long>(x.late),
                static_cast<double>(t.round_kernel_ns.back()) / 1e6, top.c_str());
    std::fflush(stdout);
    t.all.lat_us.insert(t.all.lat_us.end(), x.lat_us.begin(), x.lat_us.end());
    t.all.errors += x.errors;
    t.all.late += x.late;
  };
  auto tids_of = [](const Target& t) { return t.threads.empty() ? ThreadsOf(t.pid) : t.threads; };
  for (int r = 0; r < f.rounds; ++r) {
    if (f.slice_ms > 0 && targets.size() > 1) {
      std::vector<uint16_t> ports;
      std::vector<std::string> requests;
      std::vector<int64_t> cpu0;
      for (size_t k = 0; k < targets.size(); ++k) {  // rotate which target has the first slice
        const Target& t = targets[(k + static_cast<size_t>(r)) % targets.size()];
        ports.push_back(t.port);
        requests.push_back(request(t.port));
        cpu0.push_back(CpuNs(t.pid, tids_of(t)));
      }
      std::vector<Result> xs = Run(ports, requests, f.rate, f.seconds, f.warmup, f.connections, f.slice_ms / 1e3);
      for (size_t k = 0; k < targets.size(); ++k) {
        Target& t = targets[(k + static_cast<size_t>(r)) % targets.size()];
        record(r, t, xs[k], CpuNs(t.pid, tids_of(t)) - cpu0[k]);
      }
      continue;
    }
    for (size_t k = 0; k < targets.size(); ++k) {  // rotate the order each round
      Target& t = targets[(k + static_cast<size_t>(r)) % targets.size()];
      const std::vector<std::string> tids = tids_of(t);
      const int64_t cpu0 = CpuNs(t.pid, tids);
      std::vector<Result> x = Run({t.port}, {request(t.port)}, f.rate, f.seconds, f.warmup, f.connections, 0);
      record(r, t, x[0], CpuNs(t.pid, tids) - cpu0);
    }
  }

  nlohmann::json out = {{"rate", f.rate}, {"seconds", f.seconds}, {"rounds", f.rounds}, {"connections", f.connections},
                        {"policy", f.policy}, {"limits", f.limits}};
  std::map<std::string, std::array<double, 3>> pct;
  // CPU per request: the serving threads' CPU time over the requests sent (warm-up included).
  std::printf("\n%-9s %9s %10s %10s %10s %8s %12s %10s\n", "target", "requests", "p50 us", "p99 us", "p99.9 us", "errors",
              "cpu us/req", "kernel ms");
  for (Target& t : targets) {
    std::array<double, 3> p = {Pct(t.all.lat_us, 50), Pct(t.all.lat_us, 99), Pct(t.all.lat_us, 99.9)};
    pct[t.name] = p;
    const double cpu_us = t.all.sent > 0 ? static_cast<double>(t.cpu_ns) / 1e3 / static_cast<double>(t.all.sent) : NAN;
    std::printf("%-9s %9zu %10.1f %10.1f %10.1f %8lld %12.1f %10.1f\n", t.name.c_str(), t.all.lat_us.size(), p[0], p[1],
                p[2], static_cast<long long>(t.all.errors), cpu_us, static_cast<double>(Total(t.all.kernel_ns)) / 1e6);
    nlohmann::json kernel_ms = nlohmann::json::object();
    for (const auto& [name, ns] : t.all.kernel_ns) kernel_ms[name] = static_cast<double>(ns) / 1e6;
    std::vector<double> round_p99, round_kernel_ms;
    for (size_t r = 0; r < t.rounds.size(); ++r) {
      round_p99.push_back(t.rounds[r][1]);
      round_kernel_ms.push_back(static_cast<double>(t.round_kernel_ns[r]) / 1e6);
    }
    out["targets"][t.name] = {{"requests", t.all.lat_us.size()}, {"p50_us", p[0]}, {"p99_us", p[1]}, {"p999_us", p[2]},
                              {"errors", t.all.errors}, {"late_sends", t.all.late}, {"cpu_us_per_request", cpu_us},
                              {"kernel_threads_ms", kernel_ms}, {"round_p99_us", round_p99},
                              {"round_kernel_threads_ms", round_kernel_ms}};
  }
  std::printf("\nadded latency over direct (difference of percentiles):\n");
  for (const char* name : {"gateway", "nginx", "gw-worker", "nginx-b", "gw-process"}) {
    if (!pct.contains(name)) continue;
    std::array<double, 3> a;
    for (int i = 0; i < 3; ++i) a[i] = pct[name][i] - pct["direct"][i];
    std::printf("%-9s p50 %+8.1f us  p99 %+8.1f us  p99.9 %+8.1f us\n", name, a[0], a[1], a[2]);
    out["added"][name] = {{"p50_us", a[0]}, {"p99_us", a[1]}, {"p999_us", a[2]}};
  }
  auto target = [&](std::string_view name) -> const Target* {
    for (const Target& t : targets) {
      if (t.name == name) return &t;
    }
    return nullptr;
  };
  // What `name` adds over direct against what nginx adds: pooled over the rounds, and within each
  // round (a round's targets run back to back, or at once with --slice), so a stall of the
  // machine in one round does not decide the run; the median of those. `key` prefixes the JSON.
  auto compare = [&](const std::string& name, const std::string& key) {
    if (!pct.contains("nginx") || !pct.contains(name)) return;
    const double g = pct[name][1] - pct["direct"][1], n = pct["nginx"][1] - pct["direct"][1];
    const double g50 = pct[name][0] - pct["direct"][0], n50 = pct["nginx"][0] - pct["direct"][0];
    if (name == "gateway") {
      std::printf("gateway added p99 / nginx added p99 = %.2f (bar: <= 1.2); gateway added p99 %.0f us (bar: < 1000)\n",
                  n > 0 ? g / n : NAN, g);
    } else {
      std::printf("%s added p99 / nginx added p99 = %.2f\n", name.c_str(), n > 0 ? g / n : NAN);
    }
    std::printf("%s added p50 / nginx added p50 = %.2f\n", name.c_str(), n50 > 0 ? g50 / n50 : NAN);
    out[key + "ratio_p50_added"] = n50 > 0 ? g50 / n50 : -1;
    out[key + "ratio_p99_added"] = n > 0 ? g / n : -1;
    const Target* tg = target(name);
    const Target* tn = target("nginx");
    const Target* td = target("direct");
    for (int q = 0; q < 2 && tg && tn && td; ++q) {
      std::vector<double> ratios;
      for (int r = 0; r < f.rounds; ++r) {
        const double gr = tg->rounds[r][q] - td->rounds[r][q], nr = tn->rounds[r][q] - td->rounds[r][q];
        if (nr > 0 && std::isfinite(gr)) ratios.push_back(gr / nr);  // NaN: a round with no answer
      }
      if (ratios.empty()) continue;
      std::vector<double> sorted = ratios;
      std::sort(sorted.begin(), sorted.end());
      const double median = sorted.size() % 2 ? sorted[sorted.size() / 2]
                                              : (sorted[sorted.size() / 2 - 1] + sorted[sorted.size() / 2]) / 2;
      const char* which = q == 0 ? "p50" : "p99";
      std::printf("per round, %s added %s / nginx added %s: median %.2f, min %.2f, max %.2f over %zu rounds\n",
                  name.c_str(), which, which, median, sorted.front(), sorted.back(), sorted.size());
      out[key + "round_ratios_" + which + "_added"] = ratios;
      out[key + "median_round_ratio_" + which + "_added"] = median;
    }
  };
  compare("gateway", "");
  compare("nginx-b", "control_");
  compare("gw-process", "process_");
  if (!f.json_out.empty()) std::ofstream(f.json_out) << out.dump(2) << "\n";

  for (auto [pid, conf_dir] :
       {std::pair{nginx, nginx_dir}, std::pair{nginx_b, nginx_b_dir}, std::pair{gw_process, gw_process_dir}}) {
    if (pid == 0) continue;
    kill(pid, SIGTERM);
    waitpid(pid, nullptr, 0);
    std::filesystem::remove_all(conf_dir);
  }
  (*gws)->Stop();
  (*gw)->Stop();
  if (gws_worker) gws_worker->Stop();
  if (gw_worker) gw_worker->Stop();
  (*stub)->Stop();
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return Main(argc, argv); }
