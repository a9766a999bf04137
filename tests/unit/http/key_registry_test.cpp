// key_registry: the configuration's API keys and the run-time changes over them, and what a
// resolver makes of them while they change.

#include <doctest/doctest.h>

#include <chrono>
#include <string>
#include <vector>

#include "ratewall/config/loader.hpp"
#include "ratewall/http/identity.hpp"
#include "ratewall/http/key_registry.hpp"

using namespace ratewall;

namespace {

constexpr std::string_view k_hash_key = "registry-test-secret";

api_key_config seed_key(std::string_view raw, std::string plan, std::string name = "") {
  return api_key_config{sha256(raw), std::move(plan), std::move(name)};
}

key_change put(std::string_view raw, std::string plan, std::string name = "") {
  return key_change{sha256(raw), key_meaning{std::move(plan), std::move(name)}};
}

key_change erase(std::string_view raw) {
  return key_change{sha256(raw), std::nullopt};
}

// The i-th made-up key's SHA-256, cheaper than hashing a text a million times.
sha256_digest nth_sha(std::uint32_t i) {
  sha256_digest d{};
  d[0] = static_cast<std::uint8_t>(i >> 24);
  d[1] = static_cast<std::uint8_t>(i >> 16);
  d[2] = static_cast<std::uint8_t>(i >> 8);
  d[3] = static_cast<std::uint8_t>(i);
  d[31] = 0x5a;
  return d;
}

}  // namespace

TEST_CASE("key registry: a run-time change overrides the configuration's key, a delete hides it") {
  key_registry keys(k_hash_key);
  keys.set_seed({seed_key("alpha", "free", "alpha-co"), seed_key("beta", "gold")});
  CHECK(keys.find(sha256("alpha")) == key_meaning{"free", "alpha-co"});
  CHECK(!keys.find(sha256("gamma")));

  const auto before = keys.version();
  CHECK(keys.apply(put("alpha", "gold", "alpha-upgraded")));
  CHECK(keys.version() > before);
  CHECK(keys.find(sha256("alpha")) == key_meaning{"gold", "alpha-upgraded"});
  // The same change again changes nothing, and does not make every thread look again.
  const auto after = keys.version();
  CHECK_FALSE(keys.apply(put("alpha", "gold", "alpha-upgraded")));
  CHECK(keys.version() == after);

  CHECK(keys.apply(erase("beta")));
  CHECK(!keys.find(sha256("beta")));
  // A reload brings the configuration's keys again: the run-time delete still wins.
  keys.set_seed({seed_key("alpha", "free"), seed_key("beta", "gold")});
  CHECK(!keys.find(sha256("beta")));
  CHECK(keys.find(sha256("alpha")) == key_meaning{"gold", "alpha-upgraded"});
  CHECK(keys.changes() == 2);

  SUBCASE("a key put back after a delete is known again") {
    CHECK(keys.apply(put("beta", "free")));
    CHECK(keys.find(sha256("beta")) == key_meaning{"free", ""});
  }
  SUBCASE("replacing the changes (a journal loaded again) leaves the seed") {
    keys.replace_changes({put("gamma", "gold")});
    CHECK(keys.find(sha256("beta")) == key_meaning{"gold", ""});
    CHECK(keys.find(sha256("alpha")) == key_meaning{"free", ""});
    CHECK(keys.find(sha256("gamma")) == key_meaning{"gold", ""});
    CHECK(keys.changes() == 1);
  }
}

TEST_CASE("key registry: a subject finds its key's name; list pages in SHA-256 order by plan") {
  config cfg = parse_config(R"(upstreams: { api: { targets: [127.0.0.1:1] } }
plans: { gold: {}, free: {} }
routes:
  - { name: r, match: { path_prefix: / }, upstream: api }
)",
                            "t.yaml");
  auto shared = std::make_shared<key_registry>(k_hash_key);
  key_registry& keys = *shared;
  keys.set_seed({seed_key("alpha", "free", "alpha-co")});
  keys.apply(put("beta", "gold", "beta-co"));
  keys.apply(put("gamma", "gold"));
  keys.apply(erase("alpha"));

  // The subject is the one identity counts the key as.
  identity_resolver resolver(cfg, std::string(k_hash_key), shared);
  identity_input in;
  in.peer_ip = "192.0.2.1";
  in.api_key = "beta";
  CHECK(resolver.resolve(cfg.routes[0], in).subject == keys.subject(sha256("beta")));
  auto found = keys.find_subject(keys.subject(sha256("beta")));
  REQUIRE(found);
  CHECK(found->sha256 == sha256("beta"));
  CHECK(found->meaning.name == "beta-co");
  CHECK_FALSE(found->from_config);
  CHECK(!keys.find_subject(keys.subject(sha256("alpha"))));  // deleted
  CHECK(!keys.find_subject("key:nothex"));
  CHECK(!keys.find_subject("ip:192.0.2.1"));

  auto gold = keys.list(std::string_view("gold"), std::nullopt, 10);
  REQUIRE(gold.size() == 2);
  CHECK(gold[0].sha256 < gold[1].sha256);
  auto first = keys.list(std::nullopt, std::nullopt, 1);
  REQUIRE(first.size() == 1);
  auto rest = keys.list(std::nullopt, first[0].sha256, 10);
  REQUIRE(rest.size() == 1);
  CHECK(rest[0].sha256 > first[0].sha256);
  CHECK(keys.list(std::string_view("free"), std::nullopt, 10).empty());
}

TEST_CASE("key registry: a resolver sees a key put, changed and deleted at run time at once") {
  config cfg = parse_config(R"(upstreams: { api: { targets: [127.0.0.1:1] } }
plans: { gold: {}, free: {} }
api_keys:
  - { key: seeded, plan: free, name: seed-co }
routes:
  - { name: r, match: { path_prefix: / }, upstream: api }
)",
                            "t.yaml");
  auto keys = std::make_shared<key_registry>(k_hash_key);
  keys->set_seed(cfg.api_keys);
  identity_resolver resolver(cfg, std::string(k_hash_key), keys);
  const route_config& route = cfg.routes[0];
  identity_input in;
  in.peer_ip = "192.0.2.1";
  in.api_key = "fresh";

  // Unknown (unknown_api_key: ip): counted by address. Asked twice, so the thread caches it.
  CHECK(resolver.resolve(route, in).subject == "ip:192.0.2.1");
  CHECK(resolver.resolve(route, in).subject == "ip:192.0.2.1");

  keys->apply(put("fresh", "gold", "acme"));
  identity_result r = resolver.resolve(route, in);
  CHECK(r.source == identity_source::api_key);
  CHECK(r.subject == keys->subject(sha256("fresh")));
  CHECK(r.plan == "gold");
  CHECK(r.key_name == "acme");

  keys->apply(put("fresh", "free"));
  r = resolver.resolve(route, in);
  CHECK(r.plan == "free");
  CHECK(r.key_name.empty());

  keys->apply(erase("fresh"));
  CHECK(resolver.resolve(route, in).subject == "ip:192.0.2.1");

  // The seed's name reaches the result too, and a delete at run time hides a seed key.
  in.api_key = "seeded";
  CHECK(resolver.resolve(route, in).key_name == "seed-co");
  keys->apply(erase("seeded"));
  CHECK(resolver.resolve(route, in).subject == "ip:192.0.2.1");
}

TEST_CASE("key registry: holds a million keys, finds each, and pages through them") {
  constexpr std::uint32_t k_keys = 1'000'000;
  key_registry keys(k_hash_key);
  std::vector<key_change> changes;
  changes.reserve(k_keys);
  for (std::uint32_t i = 0; i < k_keys; ++i) {
    changes.push_back(key_change{nth_sha(i), key_meaning{i % 10 == 0 ? "gold" : "free", {}}});
  }
  keys.replace_changes(changes);
  CHECK(keys.changes() == k_keys);
  for (std::uint32_t i = 0; i < k_keys; i += 9973) {
    auto m = keys.find(nth_sha(i));
    REQUIRE(m);
    CHECK(m->plan == (i % 10 == 0 ? "gold" : "free"));
  }
  CHECK(!keys.find(nth_sha(k_keys)));
  // The gold keys are every tenth: their first page starts at key 0, in SHA-256 order.
  auto page = keys.list(std::string_view("gold"), std::nullopt, 100);
  REQUIRE(page.size() == 100);
  CHECK(page.front().sha256 == nth_sha(0));
  CHECK(page.back().sha256 == nth_sha(990));
  auto next = keys.list(std::string_view("gold"), page.back().sha256, 1);
  REQUIRE(next.size() == 1);
  CHECK(next.front().sha256 == nth_sha(1000));
}
