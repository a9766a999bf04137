// Identity microbenchmarks: what naming a client costs per request, by its source.
//
//   cmake --build build --target ratewall_bench && ./build/ratewall_bench
//   --benchmark_filter=identity
//
// resolve_* go through identity_resolver::resolve as a request does (route identify_by, the
// per-thread caches warm); verify_* check one token's signature and claims with no cache, what
// a token costs the first time a thread sees it.

#include <benchmark/benchmark.h>
#include <malloc.h>
#include <stdlib.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

#include "ratewall/config/loader.hpp"
#include "ratewall/http/identity.hpp"
#include "ratewall/http/jwt.hpp"
#include "support/jwt_mint.hpp"

using namespace ratewall;
using namespace ratewall::testing;

namespace {

const std::string k_secret = "bench-secret-0123456789abcdef0123456789";

struct world {
  jwt_signer rsa = jwt_signer::rsa("r");
  jwt_signer ec = jwt_signer::ec("e");
  jwt_signer hs = jwt_signer::hs(k_secret);
  std::string dir;
  config cfg;
  std::unique_ptr<identity_resolver> resolver;

  world() {
    char tmpl[] = "/tmp/ratewall-bench-XXXXXX";
    dir = ::mkdtemp(tmpl);
    std::ofstream(dir + "/jwks.json") << jwks_of({&rsa, &ec});
    ::setenv("RATEWALL_BENCH_JWT_SECRET", k_secret.c_str(), 1);
    cfg = parse_config(
        "identity:\n  jwt: { jwks_file: jwks.json, hs256_secret_env: RATEWALL_BENCH_JWT_SECRET, "
        "algorithms: [RS256, ES256, HS256] }\n"
        "upstreams:\n  api: { targets: [127.0.0.1:8000] }\n"
        "routes:\n  - { name: jwt, upstream: api, identify_by: [jwt:sub, ip] }\n"
        "  - { name: ip, upstream: api, identify_by: [ip] }\n",
        dir + "/bench.yaml");
    resolver = std::make_unique<identity_resolver>(cfg, "hash-key");
  }
  ~world() { std::filesystem::remove_all(dir); }
};

world& the_world() {
  static world w;
  return w;
}

nlohmann::json claims() {
  return {{"sub", "user-1234"}, {"exp", unix_now() + 3600}, {"aud", "api"}};
}

void resolve_ip(benchmark::State& state) {
  world& w = the_world();
  identity_input in;
  in.peer_ip = "203.0.113.9";
  for (auto _ : state) {
    benchmark::DoNotOptimize(w.resolver->resolve(w.cfg.routes[1], in));
  }
}
BENCHMARK(resolve_ip);

// One client's token, again and again: the cache answers, exp is checked.
void resolve_jwt_cached(benchmark::State& state) {
  world& w = the_world();
  const std::string authorization = "Bearer " + w.rsa.sign(claims());
  identity_input in;
  in.peer_ip = "203.0.113.9";
  in.authorization = authorization;
  for (auto _ : state) {
    benchmark::DoNotOptimize(w.resolver->resolve(w.cfg.routes[0], in));
  }
}
BENCHMARK(resolve_jwt_cached);

void verify(benchmark::State& state, const jwt_signer& signer) {
  world& w = the_world();
  const jwt_verifier verifier(*w.cfg.identity.jwt, w.cfg.source, {"sub"});
  const std::string token = signer.sign(claims());
  for (auto _ : state) {
    benchmark::DoNotOptimize(verifier.verify(token));
  }
}
void verify_hs256(benchmark::State& state) {
  verify(state, the_world().hs);
}
void verify_rs256(benchmark::State& state) {
  verify(state, the_world().rsa);
}
void verify_es256(benchmark::State& state) {
  verify(state, the_world().ec);
}
BENCHMARK(verify_hs256);
BENCHMARK(verify_rs256);
BENCHMARK(verify_es256);

}  // namespace

namespace {

// A million run-time keys (issue 13: "holds a million keys"): what they take in memory, and
// what a thread pays to look one up when its cache must ask the registry (a key not seen since
// the last change).
struct million_keys {
  static constexpr std::uint32_t k_keys = 1'000'000;
  std::unique_ptr<key_registry> keys;
  std::size_t heap_bytes = 0;

  static sha256_digest nth(std::uint32_t i) {
    sha256_digest d{};
    std::memcpy(d.data(), &i, sizeof i);
    d[31] = 0xa5;
    return d;
  }

  million_keys() {
    std::vector<key_change> changes;
    changes.reserve(k_keys);
    for (std::uint32_t i = 0; i < k_keys; ++i) {
      changes.push_back(key_change{nth(i), key_meaning{"premium", "customer"}});
    }
    // Large tables come from mmap (hblkhd), small blocks from the heap (uordblks).
    auto heap = [] {
      const struct mallinfo2 m = ::mallinfo2();
      return m.uordblks + m.hblkhd;
    };
    const std::size_t before = heap();
    keys = std::make_unique<key_registry>("hash-key");
    keys->replace_changes(changes);
    heap_bytes = heap() - before;
  }
};

million_keys& the_keys() {
  static million_keys k;
  return k;
}

void key_registry_find(benchmark::State& state) {
  million_keys& k = the_keys();
  std::uint32_t i = 0;
  for (auto _ : state) {
    benchmark::DoNotOptimize(k.keys->find(million_keys::nth(i)));
    i = (i + 7919) % million_keys::k_keys;
  }
  state.counters["heap_bytes_per_key"] = static_cast<double>(k.heap_bytes) / million_keys::k_keys;
}
BENCHMARK(key_registry_find);

}  // namespace
