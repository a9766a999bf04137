// Identity microbenchmarks: what naming a client costs per request, by its source.
//
//   cmake --build build --target ratewall_bench && ./build/ratewall_bench
//   --benchmark_filter=identity
//
// resolve_* go through identity_resolver::resolve as a request does (route identify_by, the
// per-thread caches warm); verify_* check one token's signature and claims with no cache, what
// a token costs the first time a thread sees it.

#include <benchmark/benchmark.h>
#include <stdlib.h>

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
