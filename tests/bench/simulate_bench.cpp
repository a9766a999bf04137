// `ratewall simulate` replay speed: requests per second for a generated trace of 1M requests in
// each format, read from a file as the command does (in pieces, parsing, routing, identity,
// limiter and summary; no line per request printed).
//
//   ./build-release/ratewall_bench --benchmark_filter=simulate
//
// The trace (scripts/sim_trace.py writes the same to a file): 4 routes of
// config/examples/simulate-bench.yaml, 2,000 client addresses, API keys on one request in 5,
// 50 users behind a trusted proxy on one in 7, one request every 50 µs (20,000 per second:
// many are denied).

#include <benchmark/benchmark.h>

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <ostream>
#include <stdexcept>
#include <streambuf>
#include <string>

#include "ratewall/sim/simulate.hpp"

using namespace ratewall;

namespace {

constexpr std::size_t k_requests = 1'000'000;

const char* const k_paths[] = {"/api/search?q=shoes", "/api/upload", "/api/orders/42",
                               "/index.html"};

// Request i of the trace: its client address, path and method.
struct generated {
  std::string ip;
  const char* path;
  const char* method;
  int key;   // -1: none, else key-<key>
  int user;  // -1: none, else u-<user> (from 10.0.0.1)
};

generated request_of(std::size_t i) {
  const std::size_t client = (i * 7919) % 2000;
  generated g;
  g.ip = "198.51." + std::to_string(client / 250) + "." + std::to_string(client % 250 + 1);
  g.path = k_paths[i % 4];
  g.method = i % 10 == 3 ? "POST" : "GET";
  g.key = i % 5 == 0 ? static_cast<int>(client % 200) : -1;
  g.user = i % 7 == 0 ? static_cast<int>(client % 50) : -1;
  if (g.user >= 0) {
    g.ip = "10.0.0.1";
  }
  return g;
}

std::string csv_trace() {
  std::string text = "time_s,method,path,api_key,user,ip\n";
  char line[256];
  for (std::size_t i = 0; i < k_requests; ++i) {
    generated g = request_of(i);
    std::snprintf(line, sizeof line, "%zu.%06zu,%s,%s,%s,%s,%s\n", i / 20000, (i % 20000) * 50,
                  g.method, g.path, g.key >= 0 ? ("key-" + std::to_string(g.key)).c_str() : "",
                  g.user >= 0 ? ("u-" + std::to_string(g.user)).c_str() : "", g.ip.c_str());
    text += line;
  }
  return text;
}

std::string nginx_trace() {
  std::string text;
  char line[512];
  for (std::size_t i = 0; i < k_requests; ++i) {
    generated g = request_of(i);
    const std::size_t s = i / 20000;  // nginx logs whole seconds
    std::snprintf(line, sizeof line,
                  "%s - %s [10/Oct/2024:%02zu:%02zu:%02zu +0200] \"%s %s HTTP/1.1\" 200 512 \"-\" "
                  "\"Mozilla/5.0 (X11; Linux x86_64)\"\n",
                  g.ip.c_str(), g.user >= 0 ? ("u-" + std::to_string(g.user)).c_str() : "-",
                  13 + s / 3600, s / 60 % 60, s % 60, g.method, g.path);
    text += line;
  }
  return text;
}

std::string access_log_trace() {
  std::string text;
  char line[768];
  for (std::size_t i = 0; i < k_requests; ++i) {
    generated g = request_of(i);
    const std::size_t ms = i / 20;
    std::snprintf(line, sizeof line,
                  R"({"time":"2024-10-10T13:%02zu:%02zu.%03zuZ","request_id":"%016zx",)"
                  R"("method":"%s","path":"%s","host":"api.example.com","route":null,)"
                  R"("subject":"%016zx","plan":null,"key":null,"client":null,)"
                  R"("user_agent":"curl/8.1","decision":"allowed","limit":null,"status":200,)"
                  R"("upstream":"10.0.0.5:8000","upstream_ms":1.250,"duration_ms":1.500,)"
                  R"("bytes_in":0,"bytes_out":512})"
                  "\n",
                  ms / 60000 % 60, ms / 1000 % 60, ms % 1000, i, g.method, g.path,
                  std::hash<std::string>{}(g.ip));
    text += line;
  }
  return text;
}

// Output goes nowhere: the benchmark measures the replay, not a terminal.
class null_buffer : public std::streambuf {
 protected:
  int overflow(int c) override { return c; }
};

// The trace in a file of its own, removed when the benchmark ends.
class trace_on_disk {
 public:
  explicit trace_on_disk(const std::string& text) {
    char name[] = "/tmp/ratewall-simulate-bench-XXXXXX";
    int fd = ::mkstemp(name);
    if (fd < 0) {
      throw std::runtime_error("mkstemp failed");
    }
    path_ = name;
    std::FILE* file = ::fdopen(fd, "wb");
    const bool written =
        file != nullptr && std::fwrite(text.data(), 1, text.size(), file) == text.size();
    if (file == nullptr || std::fclose(file) != 0 || !written) {
      throw std::runtime_error("cannot write " + path_);
    }
  }
  ~trace_on_disk() { std::remove(path_.c_str()); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// Each iteration is what `ratewall simulate --summary` does with a trace file: load the
// config, read the file a piece at a time, replay it.
void replay_trace(benchmark::State& state, const std::string& text, trace_format format) {
  const trace_on_disk file(text);
  null_buffer nothing;
  std::ostream out(&nothing);
  simulate_options options;
  options.config_path = std::string(RATEWALL_SOURCE_DIR) + "/config/examples/simulate-bench.yaml";
  options.trace_path = file.path();
  options.summary_only = true;
  options.format = format;
  for (auto _ : state) {
    if (run_simulate(options, out, out) != 0) {
      state.SkipWithError("the trace was refused");
    }
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * k_requests));
}

void BM_simulate_csv(benchmark::State& state) {
  replay_trace(state, csv_trace(), trace_format::csv);
}

void BM_simulate_access_log(benchmark::State& state) {
  replay_trace(state, access_log_trace(), trace_format::access_log);
}

void BM_simulate_nginx(benchmark::State& state) {
  replay_trace(state, nginx_trace(), trace_format::nginx);
}

}  // namespace

BENCHMARK(BM_simulate_csv)->Unit(benchmark::kMillisecond)->MinTime(3);
BENCHMARK(BM_simulate_access_log)->Unit(benchmark::kMillisecond)->MinTime(3);
BENCHMARK(BM_simulate_nginx)->Unit(benchmark::kMillisecond)->MinTime(3);
