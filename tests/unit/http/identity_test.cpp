#include <doctest/doctest.h>

#include <string>

#include "ratewall/core/hash.hpp"
#include "ratewall/core/parse.hpp"
#include "ratewall/http/identity.hpp"

using namespace ratewall;

namespace {

constexpr std::string_view k_hash_key = "test-hash-key";

cidr range(std::string_view text) {
  auto c = parse_cidr(text);
  REQUIRE(c.ok());
  return *c;
}

api_key_config declared(std::string_view raw_key, std::string plan) {
  return api_key_config{sha256(raw_key), std::move(plan), ""};
}

config sample_config(unknown_key_policy unknown = unknown_key_policy::ip) {
  config cfg;
  cfg.identity.trusted_proxies = {range("127.0.0.1/32"), range("10.0.0.0/8"),
                                  range("2001:db8:ffff::/48")};
  cfg.identity.unknown_api_key = unknown;
  cfg.plans = {"free", "premium"};
  cfg.api_keys = {declared("demo-free-key", "free"), declared("premium-key", "premium")};
  cfg.routes.emplace_back();  // default identify_by: api_key, user, ip
  return cfg;
}

identity_result resolve(const config& cfg, const identity_input& in) {
  identity_resolver resolver(cfg, std::string(k_hash_key));
  return resolver.resolve(cfg.routes.front(), in);
}

bool is_hex(std::string_view s) {
  return s.find_first_not_of("0123456789abcdef") == std::string_view::npos;
}

}  // namespace

TEST_CASE("the peer is the client when it is not a trusted proxy") {
  config cfg = sample_config();
  auto r = resolve(cfg, {.peer_ip = "203.0.113.7"});
  CHECK(r.source == identity_source::ip);
  CHECK(r.subject == "ip:203.0.113.7");
  CHECK(r.client_ip == "203.0.113.7");
  CHECK(r.plan.empty());
  CHECK_FALSE(r.rejected);
}

TEST_CASE("a spoofed X-Forwarded-For from an untrusted peer never changes the subject") {
  config cfg = sample_config();
  for (std::string_view xff :
       {"198.51.100.1", "10.0.0.1", "198.51.100.1, 10.0.0.2", "garbage", "[2001:db8::1]:80", ""}) {
    CAPTURE(xff);
    auto r = resolve(cfg, {.peer_ip = "203.0.113.7", .forwarded_for = xff});
    CHECK(r.subject == "ip:203.0.113.7");
    CHECK(r.client_ip == "203.0.113.7");
  }
}

TEST_CASE("behind trusted proxies X-Forwarded-For is read right to left, skipping trusted hops") {
  config cfg = sample_config();

  SUBCASE("one trusted hop") {
    auto r = resolve(cfg, {.peer_ip = "10.0.0.1", .forwarded_for = "203.0.113.5"});
    CHECK(r.subject == "ip:203.0.113.5");
    CHECK(r.client_ip == "203.0.113.5");
  }
  SUBCASE("a chain: the first untrusted address from the right is the client") {
    // The left-most entry was written by the client itself and must not win.
    auto r = resolve(cfg, {.peer_ip = "10.0.0.1",
                           .forwarded_for = "198.51.100.9, 203.0.113.5, 10.0.0.2,127.0.0.1"});
    CHECK(r.subject == "ip:203.0.113.5");
  }
  SUBCASE("several X-Forwarded-For headers joined by commas") {
    auto r = resolve(cfg, {.peer_ip = "127.0.0.1", .forwarded_for = "198.51.100.9,10.9.9.9"});
    CHECK(r.subject == "ip:198.51.100.9");
  }
  SUBCASE("every hop trusted: the left-most address") {
    auto r = resolve(cfg, {.peer_ip = "10.0.0.1", .forwarded_for = "10.1.1.1, 10.0.0.2"});
    CHECK(r.subject == "ip:10.1.1.1");
  }
  SUBCASE("no header: the trusted peer itself") {
    auto r = resolve(cfg, {.peer_ip = "10.0.0.1"});
    CHECK(r.subject == "ip:10.0.0.1");
  }
  SUBCASE("a malformed entry stops the walk at the last address read") {
    auto r =
        resolve(cfg, {.peer_ip = "10.0.0.1", .forwarded_for = "203.0.113.5, unknown, 10.0.0.2"});
    CHECK(r.subject == "ip:10.0.0.2");
    auto s = resolve(cfg, {.peer_ip = "10.0.0.1", .forwarded_for = "203.0.113.5, 1.2.3"});
    CHECK(s.subject == "ip:10.0.0.1");
  }
  SUBCASE("empty list elements are skipped") {
    auto r = resolve(cfg, {.peer_ip = "10.0.0.1", .forwarded_for = "203.0.113.5, ,, "});
    CHECK(r.subject == "ip:203.0.113.5");
  }
  SUBCASE("addresses with ports and brackets") {
    auto r = resolve(cfg, {.peer_ip = "10.0.0.1", .forwarded_for = "203.0.113.5:4711"});
    CHECK(r.subject == "ip:203.0.113.5");
    auto s = resolve(cfg, {.peer_ip = "10.0.0.1", .forwarded_for = "[2001:db8:1:2::9]:443"});
    CHECK(s.subject == "ip:2001:db8:1:2::/64");
    CHECK(s.client_ip == "2001:db8:1:2::9");
  }
  SUBCASE("a trusted IPv6 proxy") {
    auto r = resolve(cfg, {.peer_ip = "2001:db8:ffff::1", .forwarded_for = "203.0.113.5"});
    CHECK(r.subject == "ip:203.0.113.5");
  }
}

TEST_CASE("a declared API key identifies the client and gives its plan") {
  config cfg = sample_config();
  auto r = resolve(cfg, {.peer_ip = "203.0.113.7", .api_key = "premium-key"});
  CHECK(r.source == identity_source::api_key);
  CHECK(r.plan == "premium");
  REQUIRE(r.subject.size() == 4 + 32);
  CHECK(r.subject.starts_with("key:"));
  CHECK(is_hex(r.subject.substr(4)));
  CHECK(r.subject.find("premium-key") == std::string::npos);
  CHECK(r.client_ip == "203.0.113.7");

  SUBCASE("the same key from another address is the same subject") {
    auto s = resolve(cfg, {.peer_ip = "198.51.100.1", .api_key = "premium-key"});
    CHECK(s.subject == r.subject);
  }
  SUBCASE("another key is another subject") {
    auto s = resolve(cfg, {.peer_ip = "203.0.113.7", .api_key = "demo-free-key"});
    CHECK(s.plan == "free");
    CHECK(s.subject != r.subject);
  }
  SUBCASE("the subject depends on the hash key") {
    identity_resolver other(cfg, "another-secret");
    auto s =
        other.resolve(cfg.routes.front(), {.peer_ip = "203.0.113.7", .api_key = "premium-key"});
    CHECK(s.subject != r.subject);
    CHECK(s.plan == "premium");
  }
}

TEST_CASE("Authorization: Bearer carries an API key") {
  config cfg = sample_config();
  auto from_header = resolve(cfg, {.peer_ip = "203.0.113.7", .api_key = "demo-free-key"});
  for (std::string_view auth :
       {"Bearer demo-free-key", "bearer demo-free-key", "BEARER   demo-free-key  "}) {
    CAPTURE(auth);
    auto r = resolve(cfg, {.peer_ip = "203.0.113.7", .authorization = auth});
    CHECK(r.source == identity_source::api_key);
    CHECK(r.plan == "free");
    CHECK(r.subject == from_header.subject);
  }
  SUBCASE("other schemes are not keys") {
    auto r =
        resolve(cfg, {.peer_ip = "203.0.113.7", .authorization = "Basic ZGVtby1mcmVlLWtleQ=="});
    CHECK(r.source == identity_source::ip);
    auto s = resolve(cfg, {.peer_ip = "203.0.113.7", .authorization = "Bearerdemo-free-key"});
    CHECK(s.source == identity_source::ip);
  }
  SUBCASE("the API key header wins over Authorization") {
    auto r = resolve(cfg, {.peer_ip = "203.0.113.7",
                           .api_key = "premium-key",
                           .authorization = "Bearer demo-free-key"});
    CHECK(r.plan == "premium");
  }
}

TEST_CASE("an unknown API key follows identity.unknown_api_key") {
  const identity_input in{.peer_ip = "203.0.113.7", .api_key = "made-up-key-1"};

  SUBCASE("ip: the key is ignored and the next sources decide") {
    config cfg = sample_config(unknown_key_policy::ip);
    auto r = resolve(cfg, in);
    CHECK_FALSE(r.rejected);
    CHECK(r.source == identity_source::ip);
    CHECK(r.subject == "ip:203.0.113.7");
    CHECK(r.plan.empty());
    // Rotating made-up keys does not escape the IP limit.
    auto s = resolve(cfg, {.peer_ip = "203.0.113.7", .api_key = "made-up-key-2"});
    CHECK(s.subject == r.subject);
  }
  SUBCASE("reject: the request is refused") {
    config cfg = sample_config(unknown_key_policy::reject);
    auto r = resolve(cfg, in);
    CHECK(r.rejected);
    CHECK(r.source == identity_source::api_key);
    CHECK(r.subject == "ip:203.0.113.7");  // what identity.reject_limit counts the 401s by
    CHECK(r.client_ip == "203.0.113.7");
    // A declared key is still fine.
    CHECK_FALSE(resolve(cfg, {.peer_ip = "203.0.113.7", .api_key = "premium-key"}).rejected);
    // No key at all is not an unknown key.
    CHECK_FALSE(resolve(cfg, {.peer_ip = "203.0.113.7"}).rejected);
  }
  SUBCASE("allow: the key is its own subject with the default plan") {
    config cfg = sample_config(unknown_key_policy::allow);
    auto r = resolve(cfg, in);
    CHECK_FALSE(r.rejected);
    CHECK(r.source == identity_source::api_key);
    CHECK(r.plan.empty());
    CHECK(r.subject.starts_with("key:"));
    CHECK(r.subject.size() == 4 + 32);
    CHECK(r.subject.find("made-up") == std::string::npos);
    auto s = resolve(cfg, {.peer_ip = "198.51.100.1", .api_key = "made-up-key-1"});
    CHECK(s.subject == r.subject);
    auto t = resolve(cfg, {.peer_ip = "203.0.113.7", .api_key = "made-up-key-2"});
    CHECK(t.subject != r.subject);
  }
}

TEST_CASE("a key has the same subject whether declared or allowed as unknown") {
  // Declaring a key that was in use under `allow` keeps its counters.
  config allow = sample_config(unknown_key_policy::allow);
  auto before = resolve(allow, {.peer_ip = "203.0.113.7", .api_key = "new-key"});
  allow.api_keys.push_back(declared("new-key", "premium"));
  auto after = resolve(allow, {.peer_ip = "203.0.113.7", .api_key = "new-key"});
  CHECK(before.subject == after.subject);
  CHECK(after.plan == "premium");
}

TEST_CASE("the user header names the client when a trusted proxy sent it") {
  config cfg = sample_config();
  auto r = resolve(cfg, {.peer_ip = "10.0.0.1", .user = "alice@example.com"});
  CHECK(r.source == identity_source::user);
  REQUIRE(r.subject.size() == 5 + 32);
  CHECK(r.subject.starts_with("user:"));
  CHECK(is_hex(r.subject.substr(5)));
  CHECK(r.subject.find("alice") == std::string::npos);
  CHECK(resolve(cfg, {.peer_ip = "127.0.0.1", .user = "alice@example.com"}).subject == r.subject);
  CHECK(resolve(cfg, {.peer_ip = "10.0.0.1", .user = "bob"}).subject != r.subject);

  SUBCASE("from an untrusted peer it is ignored") {
    auto s = resolve(cfg, {.peer_ip = "203.0.113.7", .user = "alice@example.com"});
    CHECK(s.source == identity_source::ip);
    CHECK(s.subject == "ip:203.0.113.7");
  }
  SUBCASE("an API key comes first in the default order") {
    auto s = resolve(cfg, {.peer_ip = "10.0.0.1", .api_key = "premium-key", .user = "alice"});
    CHECK(s.source == identity_source::api_key);
  }
}

TEST_CASE("sources are tried in the route's identify_by order") {
  config cfg = sample_config();
  identity_resolver resolver(cfg, std::string(k_hash_key));
  const identity_input in{.peer_ip = "10.0.0.1",
                          .api_key = "premium-key",
                          .user = "alice",
                          .forwarded_for = "203.0.113.5"};
  route_config route;

  route.identify_by = {single_source(identity_source::user),
                       single_source(identity_source::api_key)};
  CHECK(resolver.resolve(route, in).source == identity_source::user);

  route.identify_by = {single_source(identity_source::ip), single_source(identity_source::api_key)};
  auto by_ip = resolver.resolve(route, in);
  CHECK(by_ip.source == identity_source::ip);
  CHECK(by_ip.subject == "ip:203.0.113.5");
  CHECK(by_ip.plan.empty());

  SUBCASE("when no listed source applies, the client IP still limits the request") {
    route.identify_by = {single_source(identity_source::api_key)};
    auto r = resolver.resolve(route, {.peer_ip = "203.0.113.7"});
    CHECK(r.source == identity_source::ip);
    CHECK(r.subject == "ip:203.0.113.7");
    route.identify_by = {};
    CHECK(resolver.resolve(route, {.peer_ip = "203.0.113.7"}).subject == "ip:203.0.113.7");
  }
}

TEST_CASE("IPv6 clients are grouped by identity.ipv6_prefix") {
  config cfg = sample_config();
  auto a = resolve(cfg, {.peer_ip = "2001:db8:1:2:aaaa:bbbb:cccc:dddd"});
  auto b = resolve(cfg, {.peer_ip = "2001:db8:1:2::1"});
  auto c = resolve(cfg, {.peer_ip = "2001:db8:1:3::1"});
  CHECK(a.subject == "ip:2001:db8:1:2::/64");
  CHECK(b.subject == a.subject);
  CHECK(c.subject == "ip:2001:db8:1:3::/64");
  CHECK(a.client_ip == "2001:db8:1:2:aaaa:bbbb:cccc:dddd");

  SUBCASE("/48") {
    cfg.identity.ipv6_prefix = 48;
    CHECK(resolve(cfg, {.peer_ip = "2001:db8:1:2::1"}).subject == "ip:2001:db8:1::/48");
  }
  SUBCASE("/128: one subject per address") {
    cfg.identity.ipv6_prefix = 128;
    CHECK(resolve(cfg, {.peer_ip = "2001:db8:1:2::1"}).subject == "ip:2001:db8:1:2::1");
  }
  SUBCASE("a link-local peer with a zone") {
    CHECK(resolve(cfg, {.peer_ip = "fe80::1:2%eth0"}).subject == "ip:fe80::/64");
  }
}

TEST_CASE("a v4-mapped IPv6 peer is treated as IPv4") {
  config cfg = sample_config();
  auto r = resolve(cfg, {.peer_ip = "::ffff:203.0.113.7"});
  CHECK(r.subject == "ip:203.0.113.7");
  CHECK(r.client_ip == "203.0.113.7");
  CHECK(resolve(cfg, {.peer_ip = "::FFFF:203.0.113.7"}).subject == r.subject);

  SUBCASE("and matches IPv4 trusted_proxies") {
    auto s = resolve(cfg, {.peer_ip = "::ffff:10.0.0.1", .forwarded_for = "198.51.100.9"});
    CHECK(s.subject == "ip:198.51.100.9");
  }
}

TEST_CASE("a peer address parsed once for the connection resolves as its text does") {
  config cfg = sample_config();
  for (std::string_view peer : {"203.0.113.7", "10.0.0.1", "::ffff:10.0.0.1", "::FFFF:203.0.113.7",
                                "2001:db8:ffff::5", "fe80::1:2%eth0", "not an address"}) {
    CAPTURE(peer);
    identity_input text{.peer_ip = peer, .forwarded_for = "198.51.100.9"};
    identity_input parsed = text;
    parsed.peer_address = parse_peer_address(peer);
    const identity_result a = resolve(cfg, text);
    const identity_result b = resolve(cfg, parsed);
    CHECK(a.subject == b.subject);
    CHECK(a.client_ip == b.client_ip);
    CHECK(a.peer_trusted == b.peer_trusted);
  }
  CHECK_FALSE(parse_peer_address("not an address"));
  CHECK(parse_peer_address("fe80::1:2%eth0") == parse_peer_address("fe80::1:2"));

  SUBCASE("the parsed address is the one believed") {
    // The text is only for logs and headers: trust follows the address the socket gave.
    identity_input in{.peer_ip = "203.0.113.7", .forwarded_for = "198.51.100.9"};
    in.peer_address = parse_peer_address("10.0.0.1");
    const identity_result r = resolve(cfg, in);
    CHECK(r.peer_trusted);
    CHECK(r.subject == "ip:198.51.100.9");
  }
}

TEST_CASE("subject_hash is short, keyed and stable") {
  auto h = subject_hash("ip:203.0.113.7", k_hash_key);
  CHECK(h.size() == 16);
  CHECK(is_hex(h));
  CHECK(h == subject_hash("ip:203.0.113.7", k_hash_key));
  CHECK(h != subject_hash("ip:203.0.113.8", k_hash_key));
  CHECK(h != subject_hash("ip:203.0.113.7", "another-secret"));
}

TEST_CASE("the per-thread key cache never answers for another configuration") {
  config before = sample_config(unknown_key_policy::allow);
  identity_resolver first(before, std::string(k_hash_key));
  auto unknown = first.resolve(before.routes.front(), {.peer_ip = "203.0.113.7", .api_key = "k9"});
  CHECK(unknown.plan.empty());
  // Asked again: the cached answer is the same answer.
  auto again = first.resolve(before.routes.front(), {.peer_ip = "203.0.113.7", .api_key = "k9"});
  CHECK(again.subject == unknown.subject);

  // A reload declares the key with a plan: the new resolver must see it at once.
  config after = sample_config(unknown_key_policy::allow);
  after.api_keys.push_back(declared("k9", "premium"));
  identity_resolver second(after, std::string(k_hash_key));
  auto now_declared =
      second.resolve(after.routes.front(), {.peer_ip = "203.0.113.7", .api_key = "k9"});
  CHECK(now_declared.plan == "premium");
  CHECK(now_declared.subject == unknown.subject);  // same key, same subject: state follows it

  // And under reject, the same raw key is refused rather than served from a cache.
  config strict = sample_config(unknown_key_policy::reject);
  identity_resolver third(strict, std::string(k_hash_key));
  CHECK(third.resolve(strict.routes.front(), {.peer_ip = "203.0.113.7", .api_key = "k9"}).rejected);
}
