#pragma once

// Who is the client? Turns the request's credentials and addresses into the subject the
// limiter counts against, following the route's `identify_by` order (DESIGN §5).
//
// Subjects never hold a secret or personal data in clear: API keys and user ids are named by a
// keyed hash (HMAC-SHA-256 under `hash_key`, 32 hex digits), so subjects may go to logs,
// metrics and Redis keys as they are. Every gateway sharing a store must use the same
// hash_key, or their subjects (and so their counters) differ.
//
//   "key:<32 hex>"   HMAC(hash_key, sha256(key)): declared keys are only known by their
//                    sha256, so the raw key itself is never needed to name them.
//   "user:<32 hex>"  HMAC(hash_key, user id).
//   "ip:203.0.113.7" or "ip:2001:db8:1:2::/64" (IPv6 grouped by identity.ipv6_prefix; a
//                    v4-mapped IPv6 peer counts as its IPv4 address).
//   "header:x-tenant=<32 hex>", "path:tenant+ip=<32 hex>": any other descriptor (DESIGN §5b),
//                    single or composite, as its spelling and HMAC(hash_key, its parts'
//                    values). A composite's api_key part is the key's own subject, its ip part
//                    the ip subject.

#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "ratewall/config/config.hpp"
#include "ratewall/core/hash.hpp"
#include "ratewall/core/parse.hpp"
#include "ratewall/http/jwt.hpp"
#include "ratewall/http/key_registry.hpp"

namespace ratewall {

/// A request's header fields, as header: and cookie: descriptors read them.
class request_fields {
 public:
  /// The `index`th value (0: the first) of the fields named `name` (given in lower case,
  /// compared case-insensitively); nullopt when there are not that many.
  virtual std::optional<std::string_view> value(std::string_view name, std::size_t index) const = 0;
  /// How many fields are named `name` when case is ignored and '_' is read as '-' (CGI-style
  /// servers read X_Tenant as X-Tenant); `first` is set to the first one's value.
  virtual std::size_t count_like(std::string_view name, std::string_view& first) const = 0;

 protected:
  ~request_fields() = default;
};

/// identity.reject_limit as bearer tokens see it: a signature is checked only for a client
/// address whose budget of failures is not spent, so made-up tokens cost their sender a 429
/// before they cost the gateway a signature check (the gateway implements it).
class token_check_budget {
 public:
  /// False when `ip_subject`'s budget is spent: its new tokens are not checked.
  virtual bool available(std::string_view ip_subject) const = 0;
  /// One token of `ip_subject` failed and the request goes on as if it had sent none
  /// (on_invalid: ip); under on_invalid: reject the 401 itself is what is counted.
  virtual void charge(std::string_view ip_subject) const = 0;

 protected:
  ~token_check_budget() = default;
};

/// Header values as received; "" = absent.
struct identity_input {
  std::string_view peer_ip{};        // socket peer, textual (IPv4 or IPv6, may be v4-mapped)
  std::string_view api_key{};        // value of identity.api_key_header
  std::string_view authorization{};  // Authorization header (Bearer: identity.bearer says what)
  std::string_view user{};           // value of identity.user_header
  std::string_view forwarded_for{};  // all X-Forwarded-For values joined by ","
  const request_fields* fields = nullptr;  // header: and cookie: descriptors; null: none sent
  std::string_view path{};                 // canonical path (path: descriptors)
  std::string_view query{};                // the query as received, without "?" (query:)
  const token_check_budget* token_budget = nullptr;  // null: tokens are always checked
  // peer_ip as parse_peer_address reads it, when the caller parsed it once for the connection;
  // nullopt: it is parsed here, for each request.
  std::optional<ip_address> peer_address{};
};

/// The name PHP files a decoded query parameter or cookie under (php_register_variable_ex):
/// leading spaces dropped, cut at a NUL, ' ' and '.' made '_' before the first '[', "a[k]" the
/// array a, and an unclosed '[' made '_' with every ' ', '.' and '[' after it (PHP 8). So
/// "tenant.id", " tenant_id" and "tenant_id[]" all reach a PHP application as tenant_id.
std::string php_name(std::string_view name);

/// Whether a parameter or cookie named `decoded` (as sent, decoded) is `name` to some
/// application: the same, the same to PHP (php_name), to Rack 2 ("]name", "name]") or to
/// Express's qs ("[name]"), in any case (ASP.NET's query and cookie collections ignore it).
/// A look-alike that is not `name` itself is read differently by different applications, so
/// query:NAME and cookie:NAME refuse it: "?tenant.id=B" is tenant_id to PHP alone.
bool names_alike(std::string_view decoded, std::string_view name);

/// Whether a query (without its '?') has a parameter that is `name` to some application: its
/// decoded name is alike (names_alike).
bool query_names(std::string_view query, std::string_view name);

/// The socket peer's textual address as an address ("1.2.3.4", "::ffff:1.2.3.4", "fe80::1%eth0":
/// the zone names a local interface, not another client); nullopt when it does not parse.
std::optional<ip_address> parse_peer_address(std::string_view peer);

struct identity_result {
  // 401: an unknown key under unknown_api_key: reject, or a bearer token that does not verify
  // under identity.jwt.on_invalid: reject; `rejected_for` says which, in fixed text.
  bool rejected = false;
  std::string_view rejected_for{};
  // Not empty: the request is refused (400) for this reason, a field or parameter that names
  // the client sent more than once (the gateway and the upstream could read different ones).
  std::string refused;
  identity_source source = identity_source::ip;  // which source identified the client
  std::string subject;  // "key:<hex>", "user:<hex>", "ip:<addr or v6 prefix>"; rejected: the ip one
  std::string plan;     // plan name ("" = default)
  std::string key_name;       // the name of the API key that named the client, "" = none or no name
  std::string client_ip;      // resolved client address, full (for X-Forwarded-For and logs)
  bool peer_trusted = false;  // the socket peer is in trusted_proxies (its X-Forwarded-* count)
};

class identity_resolver {
 public:
  /// Copies what it needs from `cfg.identity`. `hash_key` is the secret of the keyed hash that
  /// names subjects. API keys are those of `keys`, which the caller keeps current (run-time
  /// changes, the seed of each configuration); without it, those of `cfg.api_keys`. With
  /// identity.jwt, loads its keys: throws config_error as jwt_verifier does.
  identity_resolver(const config& cfg, std::string hash_key,
                    std::shared_ptr<const key_registry> keys = nullptr);

  /// Rules, where DESIGN §5 leaves room:
  /// - API key: the api_key header wins over `Authorization: Bearer <key>` (scheme
  ///   case-insensitive) when identity.bearer is api_key; other Authorization schemes are not
  ///   keys. An unknown key under `unknown_api_key: ip` is ignored and the next source is tried.
  /// - jwt:CLAIM: the claim of the bearer token when identity.bearer is jwt and the token
  ///   verifies (http/jwt.hpp); a string, integer or boolean claim, not empty. A token that
  ///   does not verify is refused (`rejected`) under on_invalid: reject, else taken as absent.
  ///   Its plan_claim names the plan when it names a declared plan (else the default plan).
  ///   Verified tokens are remembered in a small per-thread cache, so a client's repeated token
  ///   costs one signature check; exp and nbf are checked at every use.
  /// - User header: honoured only when the socket peer is in trusted_proxies, i.e. set by an
  ///   authenticating proxy in front. From anyone else it is ignored (next source): a client
  ///   could otherwise get a fresh quota per made-up user id.
  /// - IP: always available; when identify_by lists no source that applies, the client IP is
  ///   used anyway, so no request goes unlimited.
  /// - header:NAME, query:NAME: present when sent once with a value that is not empty (a query
  ///   name and value are compared and counted percent-decoded, '+' as a space). Sent twice:
  ///   `refused`, since the upstream might read the other one.
  /// - cookie:NAME: the first cookie of that name in the Cookie fields (RFC 6265 §5.4 lists the
  ///   most specific first; a browser may send two with different paths). Not empty.
  /// - path:NAME: its segment of the canonical path (the router matched the template).
  /// - A composite is present when all of its parts are.
  /// - Client IP: the peer, unless the peer is trusted; then X-Forwarded-For is walked right
  ///   to left, skipping trusted hops: the first untrusted address is the client. When every
  ///   entry is trusted, or an entry is malformed ("unknown", garbage), the walk stops and the
  ///   client is the last address it could read (the left-most trusted hop, or the peer).
  ///   Empty list elements are skipped; "1.2.3.4:80" and "[v6]:80" forms are accepted.
  /// Thread-safe: const; API keys are remembered in a small per-thread cache.
  identity_result resolve(const route_config& route, const identity_input& input) const;

  /// The subject and plan that resolve() gives the client an operator names (admin API,
  /// tools), or nullopt with `*error` set:
  ///   "api_key:<key>"  a known key: its subject and plan. An unknown key has a subject of
  ///                    its own only under unknown_api_key: allow (else such a client is
  ///                    counted by IP or refused): an error otherwise.
  ///   "user:<id>"      "user:<hex>", default plan.
  ///   "ip:<address>"   "ip:<address>", IPv6 grouped by ipv6_prefix ("[v6]" accepted).
  ///   "subject:<s>"    a subject as the admin API prints it ("key:<hex>", "user:<hex>",
  ///                    "ip:<address or prefix>"), taken as is; a known key's plan is found.
  /// Thread-safe (const). Not for the request path: it hashes.
  std::optional<identity_result> resolve_named(std::string_view spec, std::string* error) const;

 private:
  struct client_address {
    std::optional<ip_address> address;  // nullopt: the peer itself did not parse
    bool peer_trusted = false;
  };

  client_address find_client(const identity_input& input) const;
  bool trusted(const ip_address& address) const;
  std::string key_subject(const sha256_digest& key_digest) const;
  std::string ip_subject(const ip_address& address) const;
  // The request's bearer token as jwt: parts read it, verified at most once per request.
  struct bearer_jwt {
    bool looked = false;
    bool sent = false;                  // a bearer token was sent (and bearer is jwt)
    bool repeated = false;              // Authorization sent more than once: refused
    const jwt_token* token = nullptr;   // the checked token; null: none sent, or not checked
    jwt_error error = jwt_error::none;  // of the token, the time checks included
  };
  const bearer_jwt& read_bearer_jwt(const identity_input& input, const client_address& client,
                                    bearer_jwt& state) const;

  /// Resolves a descriptor that is not a single api_key, user or ip into `result`: true when it
  /// is present, or when it decides the request (`rejected`, `refused`); false when a part is
  /// missing (the next descriptor is tried).
  bool resolve_descriptor(const route_config& route, const identity_descriptor& d,
                          const identity_input& input, const client_address& client,
                          bearer_jwt& jwt, identity_result& result) const;
  /// A descriptor's subject from its parts' values (see the top of this file).
  std::string descriptor_subject(const identity_descriptor& d,
                                 const std::vector<std::string>& values) const;

  // What a raw API key means here (see identify_key's per-thread cache): its hashes, and its
  // meaning as of the key registry's `version` (looked up again when the registry moved on).
  struct key_identity {
    sha256_digest sha256{};
    std::string subject;  // of a known key, or of any key under unknown_api_key: allow
    std::uint64_t version = 0;
    bool declared = false;  // known to the registry (declared or put at run time)
    std::string plan;
    std::string name;
  };
  const key_identity& identify_key(std::string_view key) const;
  /// What the API key a request sends means: the api_key header's (X_API_Key counts as
  /// X-API-Key), else, or when that one is not declared, a Bearer token's when identity.bearer
  /// is api_key; null when neither is sent. Null with `refused` set when a field that carries
  /// it was sent twice.
  const key_identity* sent_key_identity(const identity_input& input, std::string& refused) const;
  /// The user a trusted proxy's request names in identity.user_header (X_User_ID counts as
  /// X-User-ID), trimmed; empty when none. Empty with `refused` set when it was sent twice.
  std::string_view sent_user(const identity_input& input, std::string& refused) const;

  std::string hash_key_;
  hmac_sha256_key mac_key_;
  std::uint64_t generation_;  // tells this resolver's cache entries from an older one's
  std::vector<cidr> trusted_proxies_;
  unknown_key_policy unknown_api_key_;
  unsigned ipv6_prefix_;
  bool paths_case_insensitive_;  // server.paths.case_insensitive, for path: values
  bearer_use bearer_;
  std::shared_ptr<const jwt_verifier> jwt_;  // identity.jwt; null without it
  invalid_token_policy on_invalid_token_ = invalid_token_policy::reject;
  std::string plan_claim_;
  std::vector<std::string> plans_;  // declared plan names, which a plan claim must be one of
  std::string api_key_field_;       // identity.api_key_header, lower case
  std::string user_field_;          // identity.user_header, lower case
  std::shared_ptr<const key_registry> keys_;
};

/// A short keyed hash of any subject (16 hex digits), for access logs and metrics where even
/// "ip:…" should not appear in clear.
std::string subject_hash(std::string_view subject, std::string_view hash_key);

}  // namespace ratewall
