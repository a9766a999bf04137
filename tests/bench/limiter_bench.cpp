// Limiter microbenchmarks: ns per decision for each algorithm, and bytes per tracked subject.
//
//   cmake --build build --target ratewall_bench && ./build/ratewall_bench
//
// Each algorithm has its own route with one limit (100 per second, burst/limit 100), decided
// through limiter::try_check on the memory store with the real steady clock: the numbers
// include the clock read, the subject hash, the shard lock and the table lookup.

#include <benchmark/benchmark.h>
#include <malloc.h>

#include <array>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ratewall/limit/gcra.hpp"
#include "ratewall/limit/limiter.hpp"
#include "ratewall/limit/memory_store.hpp"

using namespace ratewall;

namespace {

constexpr std::array<algorithm, 6> k_algorithms = {
    algorithm::token_bucket,       algorithm::leaky_bucket,           algorithm::fixed_window,
    algorithm::sliding_window_log, algorithm::sliding_window_counter, algorithm::concurrency};

constexpr const char* k_names[] = {"token_bucket",       "leaky_bucket",           "fixed_window",
                                   "sliding_window_log", "sliding_window_counter", "concurrency"};

constexpr std::size_t k_tracked = 1'000'000;

limit_config limit_of(algorithm a) {
  limit_config l;
  l.name = "bench";
  l.algo = a;
  l.rate = {100, std::chrono::seconds(1)};
  l.burst = 100;
  l.limit = 100;
  l.window = std::chrono::seconds(1);
  return l;
}

// Route i has one limit of k_algorithms[i].
config bench_config(std::uint64_t max_keys) {
  config cfg;
  cfg.store.max_keys = max_keys;
  for (algorithm a : k_algorithms) {
    route_config route;
    route.name = "bench";
    route.limits = {limit_of(a)};
    cfg.routes.push_back(route);
  }
  return cfg;
}

std::string ip_subject(std::size_t i) {
  return "10." + std::to_string((i >> 16) & 0xff) + "." + std::to_string((i >> 8) & 0xff) + "." +
         std::to_string(i & 0xff);
}

struct environment {
  environment() : cfg(bench_config(8 * k_tracked)), lim(cfg, clk) {}
  config cfg;
  steady_clock clk;
  limiter lim;
};

environment& shared_environment() {
  static environment env;
  return env;
}

// A subject of the 1M: "s-" and the index in hex, built in registers so that the benchmark
// measures the store's memory accesses and not its own (in a server the subject was just parsed
// and is in cache).
struct subject_buffer {
  std::string_view of(std::uint32_t i) {
    static constexpr char digits[] = "0123456789abcdef";
    bytes[0] = 's';
    bytes[1] = '-';
    for (int d = 0; d < 6; ++d) {
      bytes[2 + d] = digits[(i >> (20 - 4 * d)) & 0xf];
    }
    return {bytes, 8};
  }
  char bytes[8];
};

// Visits the 1M subjects in a random order without a table of indexes.
struct random_index {
  std::uint32_t next() {
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    return static_cast<std::uint32_t>(state % k_tracked);
  }
  std::uint64_t state;
};

// 1M subjects already tracked on every route.
struct tracked_environment {
  tracked_environment() : cfg(bench_config(8 * k_tracked)), lim(cfg, clk) {
    subject_buffer buffer;
    for (std::size_t r = 0; r < k_algorithms.size(); ++r) {
      for (std::uint32_t i = 0; i < k_tracked; ++i) {
        lim.try_check({r, buffer.of(i), "", "GET"});
      }
    }
  }
  config cfg;
  steady_clock clk;
  limiter lim;
};

tracked_environment& tracked() {
  static tracked_environment env;
  return env;
}

// One subject per thread: "1 thread" and "2 threads on distinct subjects".
void bm_own_subject(benchmark::State& state) {
  environment& env = shared_environment();
  const auto route = static_cast<std::size_t>(state.range(0));
  const std::string subject = "thread-" + std::to_string(state.thread_index());
  for (auto _ : state) {
    auto r = env.lim.try_check({route, subject, "", "GET"});
    benchmark::DoNotOptimize(r->allowed);
  }
  state.SetItemsProcessed(state.iterations());
  state.SetLabel(k_names[route]);
}

// Every thread on the same subject: one shard lock, one row.
void bm_hot_subject(benchmark::State& state) {
  environment& env = shared_environment();
  const auto route = static_cast<std::size_t>(state.range(0));
  for (auto _ : state) {
    auto r = env.lim.try_check({route, "hot", "", "GET"});
    benchmark::DoNotOptimize(r->allowed);
  }
  state.SetItemsProcessed(state.iterations());
  state.SetLabel(k_names[route]);
}

// A route with two token buckets (a burst and a sustained rate): state is kept per limit, so
// this is one table lookup per limit under the one shard lock.
void bm_two_limits(benchmark::State& state) {
  config cfg;
  route_config route;
  route.name = "bench";
  limit_config sustained = limit_of(algorithm::token_bucket);
  sustained.name = "sustained";
  sustained.rate = {6000, std::chrono::minutes(1)};
  sustained.burst = 6000;
  route.limits = {limit_of(algorithm::token_bucket), sustained};
  cfg.routes.push_back(route);
  steady_clock clk;
  limiter lim(cfg, clk);
  for (auto _ : state) {
    auto r = lim.try_check({0, "thread-0", "", "GET"});
    benchmark::DoNotOptimize(r->allowed);
  }
  state.SetItemsProcessed(state.iterations());
}

// A route with routes[].adaptive, its factor at range(0) percent: at 100 the request path reads
// one atomic more; below, it also copies the route's limits to scale them (routes[].adaptive).
void bm_adaptive(benchmark::State& state) {
  config cfg;
  route_config route;
  route.name = "bench";
  route.limits = {limit_of(algorithm::token_bucket)};
  adaptive_config settings;
  settings.latency_target = std::chrono::milliseconds(100);
  settings.window = std::chrono::seconds(1);
  route.adaptive = settings;
  cfg.routes.push_back(route);
  auto adaptive = std::make_shared<adaptive_route>("bench", settings, upstream_totals{}, nanos{0});
  // Slow windows halve the factor: 100 -> 50.
  for (std::int64_t percent = 100, s = 1; percent > state.range(0); percent /= 2, ++s) {
    const auto n = static_cast<std::uint64_t>(20 * s);
    adaptive->tick(std::chrono::seconds(s), {n, 0, n, n * 500'000'000ull});
  }
  steady_clock clk;
  limiter lim(cfg, clk, std::make_shared<memory_store>(cfg), {adaptive});
  for (auto _ : state) {
    auto r = lim.try_check({0, "thread-0", "", "GET"});
    benchmark::DoNotOptimize(r->allowed);
  }
  state.SetItemsProcessed(state.iterations());
  state.SetLabel("factor " + std::to_string(adaptive->factor()));
}

// Random subjects among 1M tracked ones: cache and TLB misses dominate.
void bm_tracked_1m(benchmark::State& state) {
  tracked_environment& env = tracked();
  const auto route = static_cast<std::size_t>(state.range(0));
  subject_buffer buffer;
  random_index index{0x9e3779b97f4a7c15ull + static_cast<std::uint64_t>(state.thread_index())};
  for (auto _ : state) {
    auto r = env.lim.try_check({route, buffer.of(index.next()), "", "GET"});
    benchmark::DoNotOptimize(r->allowed);
  }
  state.SetItemsProcessed(state.iterations());
  state.SetLabel(k_names[route]);
}

// The algorithm alone, no store: the floor under the numbers above.
void bm_gcra_alone(benchmark::State& state) {
  const policy p =
      resolve_policy(limit_of(algorithm::token_bucket), nullptr, false, store_failure::allow);
  gcra::state s;
  steady_clock clk;
  for (auto _ : state) {
    const decision d = gcra::decide(s, clk.now(), p, 1);
    benchmark::DoNotOptimize(d.allowed);
  }
}

// Bytes allocated and not freed, small (arena) and large (mmap) blocks alike.
std::size_t heap_in_use() {
  const struct mallinfo2 m = mallinfo2();
  return m.uordblks + m.hblkhd;
}

// Bytes per tracked subject at 1M subjects: the store's own accounting and glibc's count of
// bytes in use (mallinfo2) before and after, for a store holding one route of the algorithm.
void bm_bytes_per_subject(benchmark::State& state) {
  const auto index = static_cast<std::size_t>(state.range(0));
  for (auto _ : state) {
    config cfg;
    cfg.store.max_keys = 2 * k_tracked;
    route_config route;
    route.name = "bench";
    route.limits = {limit_of(k_algorithms[index])};
    cfg.routes.push_back(route);
    manual_clock clk;
    const std::size_t before = heap_in_use();
    {
      auto owned = std::make_shared<memory_store>(cfg);
      memory_store* mem = owned.get();
      limiter lim(cfg, clk, std::move(owned));
      std::vector<route_decision> held;  // concurrency: keep the slots, or rows would be empty
      for (std::size_t i = 0; i < k_tracked; ++i) {
        route_decision r = *lim.try_check({0, ip_subject(i), "", "GET"});
        if (r.slot.held()) {
          held.push_back(std::move(r));
        }
      }
      // The requests in flight own their decisions and leases, not the store: count what is
      // left once they are over (concurrency rows stay until swept).
      held.clear();
      held.shrink_to_fit();
      const std::size_t after = heap_in_use();
      const memory_store::usage u = mem->memory_usage();
      const double n = static_cast<double>(u.entries);
      state.counters["entries"] = n;
      state.counters["accounted_B"] = static_cast<double>(u.table_bytes + u.heap_bytes) / n;
      state.counters["malloc_B"] = static_cast<double>(after - before) / n;
      state.counters["table_B"] = static_cast<double>(u.table_bytes) / n;
      state.counters["heap_B"] = static_cast<double>(u.heap_bytes) / n;
    }
  }
  state.SetLabel(k_names[index]);
}

// store.snapshot with a million token-bucket subjects: the time to encode them (save_rows,
// what holds each shard's lock in turn) and to restore them into a new store, and the bytes
// per row of the file's body.
void bm_snapshot_1m(benchmark::State& state) {
  config cfg;
  cfg.store.max_keys = 2 * k_tracked;
  route_config route;
  route.name = "bench";
  route.limits = {limit_of(algorithm::token_bucket)};
  cfg.routes.push_back(route);
  manual_clock clk;
  auto owned = std::make_shared<memory_store>(cfg);
  memory_store* mem = owned.get();
  limiter lim(cfg, clk, std::move(owned));
  for (std::size_t i = 0; i < k_tracked; ++i) {
    const std::string n = std::to_string(i);  // a key's subject: "key:" and 32 hex digits
    (void)lim.try_check({0, "key:" + std::string(32 - n.size(), '0') + n, "", "GET"});
  }
  for (auto _ : state) {
    std::string body;
    body.reserve(mem->size() * 64);  // as save_snapshot does
    byte_writer out(body);
    const auto t0 = std::chrono::steady_clock::now();
    const std::size_t rows = mem->save_rows(out, clk.now());
    const auto t1 = std::chrono::steady_clock::now();
    auto fresh = std::make_shared<memory_store>(cfg);
    limiter again(cfg, clk, fresh);
    snapshot_loaded counts;
    using pass = memory_store::restore_pass;
    for (const pass p : {pass::check, pass::limited, pass::rest}) {
      byte_reader in(body);
      fresh->restore_rows(in, clk.now(), true, p, counts);
    }
    const auto t2 = std::chrono::steady_clock::now();
    using ms = std::chrono::duration<double, std::milli>;
    state.counters["rows"] = static_cast<double>(rows);
    state.counters["save_ms"] = ms(t1 - t0).count();
    state.counters["restore_ms"] = ms(t2 - t1).count();
    state.counters["bytes_per_row"] = static_cast<double>(body.size()) / static_cast<double>(rows);
  }
}

void each_algorithm(benchmark::internal::Benchmark* b) {
  for (std::size_t i = 0; i < k_algorithms.size(); ++i) {
    b->Arg(static_cast<std::int64_t>(i));
  }
}

}  // namespace

BENCHMARK(bm_gcra_alone);
BENCHMARK(bm_own_subject)->Apply(each_algorithm)->Threads(1)->Threads(2)->UseRealTime();
BENCHMARK(bm_two_limits)->UseRealTime();
BENCHMARK(bm_adaptive)->Arg(100)->Arg(50)->UseRealTime();
BENCHMARK(bm_hot_subject)->Apply(each_algorithm)->Threads(2)->UseRealTime();
BENCHMARK(bm_tracked_1m)->Apply(each_algorithm)->Threads(1)->Threads(2)->UseRealTime();
BENCHMARK(bm_bytes_per_subject)
    ->Apply(each_algorithm)
    ->Iterations(1)
    ->Unit(benchmark::kMillisecond);

BENCHMARK(bm_snapshot_1m)->Iterations(1)->Unit(benchmark::kMillisecond);

BENCHMARK_MAIN();
