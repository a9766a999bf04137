// identity_resolver::resolve_named: the subject an operator names (admin API) is the subject
// that resolve() gives the same client.

#include <doctest/doctest.h>

#include <string>

#include "ratewall/core/hash.hpp"
#include "ratewall/core/parse.hpp"
#include "ratewall/http/identity.hpp"

using namespace ratewall;

namespace {

config named_config(unknown_key_policy unknown = unknown_key_policy::ip) {
  config cfg;
  auto proxies = parse_cidr("10.0.0.0/8");
  REQUIRE(proxies.ok());
  cfg.identity.trusted_proxies = {*proxies};
  cfg.identity.unknown_api_key = unknown;
  cfg.plans = {"premium"};
  cfg.api_keys = {api_key_config{sha256("premium-key"), "premium", ""}};
  cfg.routes.emplace_back();
  return cfg;
}

identity_result named(const identity_resolver& r, std::string_view spec) {
  std::string error;
  auto result = r.resolve_named(spec, &error);
  INFO(error);
  REQUIRE(result.has_value());
  return *result;
}

std::string named_error(const identity_resolver& r, std::string_view spec) {
  std::string error;
  CHECK_FALSE(r.resolve_named(spec, &error).has_value());
  return error;
}

}  // namespace

TEST_CASE("api_key:<key> names the subject and plan of a declared key") {
  config cfg = named_config();
  identity_resolver r(cfg, "k");
  auto by_request = r.resolve(cfg.routes[0], {.peer_ip = "203.0.113.7", .api_key = "premium-key"});
  auto by_name = named(r, "api_key:premium-key");
  CHECK(by_name.subject == by_request.subject);
  CHECK(by_name.plan == "premium");
  CHECK(by_name.source == identity_source::api_key);
}

TEST_CASE("user:<id> and ip:<address> name what resolve() would") {
  config cfg = named_config();
  identity_resolver r(cfg, "k");
  auto user = r.resolve(cfg.routes[0], {.peer_ip = "10.1.2.3", .user = "u-42"});
  CHECK(named(r, "user:u-42").subject == user.subject);
  CHECK(named(r, "user:u-42").plan.empty());
  CHECK(named(r, "ip:203.0.113.7").subject == "ip:203.0.113.7");
  auto v6 = r.resolve(cfg.routes[0], {.peer_ip = "2001:db8:1:2:3:4:5:6"});
  CHECK(named(r, "ip:2001:db8:1:2::9").subject == v6.subject);  // same /64
  CHECK(named(r, "ip:[2001:db8:1:2::9]").subject == v6.subject);
  CHECK(named(r, "ip:::ffff:203.0.113.7").subject == "ip:203.0.113.7");
}

TEST_CASE("an unknown key has a subject of its own only under unknown_api_key: allow") {
  SUBCASE("allow") {
    config cfg = named_config(unknown_key_policy::allow);
    identity_resolver r(cfg, "k");
    auto by_request = r.resolve(cfg.routes[0], {.peer_ip = "203.0.113.7", .api_key = "made-up"});
    CHECK(named(r, "api_key:made-up").subject == by_request.subject);
  }
  SUBCASE("ip") {
    config cfg = named_config(unknown_key_policy::ip);
    identity_resolver r(cfg, "k");
    CHECK(named_error(r, "api_key:made-up") ==
          "unknown API key (unknown_api_key: ip: its client is counted by IP)");
  }
  SUBCASE("reject") {
    config cfg = named_config(unknown_key_policy::reject);
    identity_resolver r(cfg, "k");
    CHECK(named_error(r, "api_key:made-up").find("refused") != std::string::npos);
  }
}

TEST_CASE("subject:<s> takes a printed subject back, with the plan of a declared key") {
  config cfg = named_config();
  identity_resolver r(cfg, "k");
  std::string key_subject = named(r, "api_key:premium-key").subject;
  auto back = named(r, "subject:" + key_subject);
  CHECK(back.subject == key_subject);
  CHECK(back.plan == "premium");
  std::string user_subject = named(r, "user:u-42").subject;
  CHECK(named(r, "subject:" + user_subject).subject == user_subject);
  CHECK(named(r, "subject:ip:2001:db8:1:2::/64").subject == "ip:2001:db8:1:2::/64");
  // Descriptors' subjects (identify_by: header:, query:, composites) come back as printed.
  const std::string hex(32, 'a');
  CHECK(named(r, "subject:header:x-tenant=" + hex).source == identity_source::header);
  CHECK(named(r, "subject:path:tenant+ip=" + hex).source == identity_source::path);
  CHECK(named(r, "subject:api_key+query:p=" + hex).source == identity_source::api_key);
  CHECK(named_error(r, "subject:header=" + hex).starts_with("subject: expected"));
  CHECK(named_error(r, "subject:form:a=" + hex).starts_with("subject: expected"));
  CHECK(named_error(r, "subject:header:a=" + hex.substr(1)).starts_with("subject: expected"));
}

TEST_CASE("malformed names are errors") {
  config cfg = named_config();
  identity_resolver r(cfg, "k");
  CHECK(named_error(r, "premium-key") ==
        "expected api_key:<key>, user:<id>, ip:<address> or subject:<subject>");
  CHECK(named_error(r, "api_key:") == "api_key: needs the key after the colon");
  CHECK(named_error(r, "user:") == "user: needs the user id after the colon");
  CHECK(named_error(r, "ip:not-an-ip") == "ip: expected an IPv4 or IPv6 address");
  CHECK(named_error(r, "subject:key:xyz") ==
        "subject: expected key:<32 hex>, user:<32 hex>, ip:<address> or a descriptor's "
        "<source>=<32 hex>");
  CHECK(named_error(r, "subject:") ==
        "subject: expected key:<32 hex>, user:<32 hex>, ip:<address> or a descriptor's "
        "<source>=<32 hex>");
}
