// GET /admin/config: the configuration as the process runs it (defaults resolved), in the
// shape of the YAML file, without secrets.

#include <nlohmann/json.hpp>

#include "ratewall/admin/admin_server.hpp"
#include "ratewall/core/hash.hpp"
#include "ratewall/core/parse.hpp"

namespace ratewall {

namespace {

using json = nlohmann::ordered_json;

// Enough of a key's SHA-256 to tell declared keys apart, far too little to test guesses
// against offline.
constexpr std::size_t k_shown_key_hex = 8;

std::string cidr_text(const cidr& c) {
  if (is_v4_mapped(c.address) && c.prefix >= 96) {
    return format_ip(c.address) + "/" + std::to_string(c.prefix - 96);
  }
  return format_ip(c.address) + "/" + std::to_string(c.prefix);
}

// redis://user:secret@host:6379/0 -> redis://user:***@host:6379/0; a lone userinfo is taken
// as a password too (redis://secret@host), as Redis clients read it. The user part ends at the
// URL's last '@', as parse_redis_url reads it: a password may hold '/' or '@' unescaped.
std::string redact_url(const std::string& url) {
  auto scheme = url.find("://");
  if (scheme == std::string::npos) {
    return url;
  }
  auto start = scheme + 3;
  auto at = url.rfind('@');
  if (at == std::string::npos || at < start) {
    return url;
  }
  std::string userinfo = url.substr(start, at - start);
  auto colon = userinfo.find(':');
  std::string shown = colon == std::string::npos ? "***" : userinfo.substr(0, colon) + ":***";
  return url.substr(0, start) + shown + url.substr(at);
}

bool uses_rate(algorithm a) {
  return a == algorithm::token_bucket || a == algorithm::leaky_bucket;
}

json headers_json(const header_options& h) {
  return json{{"enabled", h.enabled},
              {"reset", h.reset_epoch ? "epoch" : "delta"},
              {"ietf_draft", h.ietf_draft}};
}

json override_json(algorithm a, const limit_override& o) {
  json j = json::object();
  if (o.rate && uses_rate(a)) {
    j["rate"] = format_rate(*o.rate);
  }
  if (o.burst && uses_rate(a)) {
    j["burst"] = *o.burst;
  }
  if (o.limit && !uses_rate(a)) {
    j["limit"] = *o.limit;
  }
  if (o.window && !uses_rate(a) && a != algorithm::concurrency) {
    j["window"] = format_duration(*o.window);
  }
  return j;
}

json limit_json(const limit_config& l) {
  json j{{"name", l.name}, {"algorithm", to_string(l.algo)}};
  // Only the keys the algorithm reads, as the loader accepts them.
  if (uses_rate(l.algo)) {
    j["rate"] = format_rate(l.rate);
    j["burst"] = l.burst;
    if (l.algo == algorithm::leaky_bucket) {
      j["delay"] = l.delay;
    }
  } else {
    j["limit"] = l.limit;
    if (l.algo != algorithm::concurrency) {
      j["window"] = format_duration(l.window);
    }
  }
  if (!l.plans.empty()) {
    json plans = json::object();
    for (const auto& [plan, o] : l.plans) {
      plans[plan] = override_json(l.algo, o);
    }
    j["plans"] = plans;
  }
  j["on_store_error"] = l.on_store_error ? json(to_string(*l.on_store_error)) : json(nullptr);
  j["shadow"] = l.shadow;
  return j;
}

json route_json(const route_config& r) {
  json match = json::object();
  if (!r.match.path_exact.empty()) {
    match["path_exact"] = r.match.path_exact;
  } else if (!r.match.path_template.empty()) {
    match["path_template"] = r.match.path_template;
  } else if (!r.match.path_regex.empty()) {
    match["path_regex"] = r.match.path_regex;
  } else {
    match["path_prefix"] = r.match.path_prefix;
  }
  if (!r.match.methods.empty()) {
    match["methods"] = r.match.methods;
  }
  if (!r.match.host.empty()) {
    match["host"] = r.match.host;
  }
  json identify = json::array();
  for (const auto& d : r.identify_by) {
    identify.push_back(to_string(d));
  }
  json cost{{"default", r.cost}};
  for (const auto& [method, c] : r.method_cost) {
    cost[method] = c;
  }
  json limits = json::array();
  for (const auto& l : r.limits) {
    limits.push_back(limit_json(l));
  }
  json deny{{"status", r.deny.status},
            {"body", r.deny.body ? json(*r.deny.body) : json(nullptr)},
            {"content_type", r.deny.content_type}};
  json out{{"name", r.name},
           {"match", match},
           {"upstream", r.upstream},
           {"identify_by", identify},
           {"cost", cost},
           {"limits", limits},
           {"shadow", r.shadow},
           {"request_buffering", r.request_buffering},
           {"grpc", r.grpc},
           {"headers", headers_json(r.headers)},
           {"deny", deny}};
  if (const auto& c = r.cost_from_response) {
    json from{{"default", c->default_cost}, {"max", c->max}};
    if (c->from == cost_from_response_config::source::header) {
      from["header"] = c->header;
    } else {
      std::string path;
      for (const std::string& key : c->json) {
        path += (path.empty() ? "" : ".") + key;
      }
      from["json"] = path;
      from["max_body"] = c->max_body;
    }
    out["cost_from_response"] = from;
  }
  if (const auto& a = r.adaptive) {
    out["adaptive"] = json{
        {"latency_target",
         a->latency_target > nanos{0} ? json(format_duration(a->latency_target)) : json(nullptr)},
        {"error_rate_target", a->error_rate_target ? json(*a->error_rate_target) : json(nullptr)},
        {"min_factor", a->min_factor},
        {"window", format_duration(a->window)}};
  }
  return out;
}

// File paths as written (relative ones are read from the config file's directory); never what
// the files hold.
json server_tls_json(const server_tls_config& tls) {
  json certificates = json::array();
  for (const auto& c : tls.certificates) {
    certificates.push_back(json{{"cert", c.cert}, {"key", c.key}});
  }
  return json{{"listen", to_string(tls.listen)},
              {"certificates", certificates},
              {"min_version", to_string(tls.min_version)}};
}

json http2_json(const http2_config& h) {
  return json{{"enabled", h.enabled},
              {"max_concurrent_streams", h.max_concurrent_streams},
              {"initial_window", h.initial_window},
              {"connection_window", h.connection_window},
              {"max_resets_per_second", h.max_resets_per_second},
              {"header_table_size", h.header_table_size},
              {"settings_timeout", format_duration(h.settings_timeout)}};
}

json upstream_tls_json(const upstream_tls_config& tls) {
  auto or_null = [](const std::string& s) { return s.empty() ? json(nullptr) : json(s); };
  return json{{"verify", tls.verify},
              {"ca_file", or_null(tls.ca_file)},
              {"server_name", or_null(tls.server_name)},
              {"client_cert", or_null(tls.client_cert)},
              {"client_key", or_null(tls.client_key)}};
}

}  // namespace

std::string effective_config_json(const config& cfg, bool token_set) {
  json j;
  j["source"] = cfg.source;
  const auto& s = cfg.server;
  j["server"] = json{{"listen", s.plain_listener ? to_string(s.listen) : "off"},
                     {"threads", s.threads},
                     {"max_header_bytes", s.max_header_bytes},
                     {"max_body_bytes", s.max_body_bytes},
                     {"header_timeout", format_duration(s.header_timeout)},
                     {"body_timeout", format_duration(s.body_timeout)},
                     {"idle_timeout", format_duration(s.idle_timeout)},
                     {"drain_timeout", format_duration(s.drain_timeout)},
                     {"max_connections", s.max_connections},
                     {"max_connections_per_client", s.max_connections_per_client},
                     {"request_buffer_bytes", s.request_buffer_bytes},
                     {"tunnel_idle_timeout", format_duration(s.tunnel_idle_timeout)},
                     {"tls", s.tls ? server_tls_json(*s.tls) : json(nullptr)},
                     {"http2", http2_json(s.http2)}};
  j["admin"] = json{{"listen", to_string(cfg.admin.listen)},
                    {"token_env", cfg.admin.token_env},
                    {"token_set", token_set},
                    {"allowed_hosts", cfg.admin.allowed_hosts},
                    {"header_timeout", format_duration(cfg.admin.header_timeout)},
                    {"max_connections", cfg.admin.max_connections},
                    {"top_window", format_duration(cfg.admin.top_window)}};
  json proxies = json::array();
  for (const auto& c : cfg.identity.trusted_proxies) {
    proxies.push_back(cidr_text(c));
  }
  const char* unknown = cfg.identity.unknown_api_key == unknown_key_policy::ip       ? "ip"
                        : cfg.identity.unknown_api_key == unknown_key_policy::reject ? "reject"
                                                                                     : "allow";
  j["identity"] = json{{"api_key_header", cfg.identity.api_key_header},
                       {"user_header", cfg.identity.user_header},
                       {"trusted_proxies", proxies},
                       {"unknown_api_key", unknown},
                       {"ipv6_prefix", cfg.identity.ipv6_prefix},
                       {"bearer", to_string(cfg.identity.bearer)}};
  if (const auto& jwt = cfg.identity.jwt) {
    // Names of the secret's variable and of the key file, never the secret.
    json algorithms = json::array();
    for (jwt_algorithm a : jwt->algorithms) {
      algorithms.push_back(to_string(a));
    }
    j["identity"]["jwt"] = json{{"algorithms", algorithms},
                                // RS256 and ES256 too, as far as jwks_file holds their keys
                                {"algorithms_from_keys", jwt->algorithms_from_keys},
                                {"jwks_file", jwt->jwks_file},
                                {"hs256_secret_env", jwt->hs256_secret_env},
                                {"issuer", jwt->issuer},
                                {"audience", jwt->audience},
                                {"leeway", format_duration(jwt->leeway)},
                                {"require_exp", jwt->require_exp},
                                {"plan_claim", jwt->plan_claim},
                                {"on_invalid", to_string(jwt->on_invalid)}};
  }
  const auto& redis = cfg.store.redis;
  j["store"] = json{{"type", cfg.store.type == store_type::memory ? "memory" : "redis"},
                    {"max_keys", cfg.store.max_keys},
                    {"on_full", cfg.store.on_full == store_full::deny ? "deny" : "allow"},
                    {"redis",
                     {{"url", redact_url(redis.url)},
                      {"cluster", redis.cluster},
                      {"timeout", format_duration(redis.timeout)},
                      {"on_error", to_string(redis.on_error)},
                      {"instances", redis.instances}}}};
  if (!cfg.store.keys_file.empty()) {
    j["store"]["keys_file"] = cfg.store.keys_file;
  }
  if (!cfg.store.snapshot_path.empty()) {
    j["store"]["snapshot"] = {{"path", cfg.store.snapshot_path},
                              {"interval", format_duration(cfg.store.snapshot_interval)}};
  }
  std::string access = "off";
  switch (cfg.log.access) {
    case access_log_sink::off:
      break;
    case access_log_sink::stdout_stream:
      access = "stdout";
      break;
    case access_log_sink::stderr_stream:
      access = "stderr";
      break;
    case access_log_sink::file:
      access = cfg.log.access_path;
      break;
  }
  j["log"] = json{{"access", access},
                  {"level", to_string(cfg.log.level)},
                  {"client_address", to_string(cfg.log.client_address)}};
  j["headers"] = headers_json(cfg.headers);
  json upstreams = json::object();
  for (const auto& u : cfg.upstreams) {
    json targets = json::array();
    for (const auto& t : u.targets) {
      targets.push_back((u.https ? "https://" : "") + to_string(t));
    }
    upstreams[u.name] = json{{"targets", targets},
                             {"connect_timeout", format_duration(u.connect_timeout)},
                             {"response_timeout", format_duration(u.response_timeout)},
                             {"read_timeout", format_duration(u.read_timeout)},
                             {"max_idle", u.max_idle},
                             {"max_connections", u.max_connections},
                             {"queue_timeout", format_duration(u.queue_timeout)},
                             {"tls", u.https ? upstream_tls_json(u.tls) : json(nullptr)}};
  }
  j["upstreams"] = upstreams;
  j["plans"] = cfg.plans;
  json keys = json::array();
  for (const auto& k : cfg.api_keys) {
    json key{{"key_sha256", to_hex(k.sha256).substr(0, k_shown_key_hex) + "..."}, {"plan", k.plan}};
    if (!k.name.empty()) {
      key["name"] = k.name;
    }
    keys.push_back(std::move(key));
  }
  j["api_keys"] = keys;
  json routes = json::array();
  for (const auto& r : cfg.routes) {
    routes.push_back(route_json(r));
  }
  j["routes"] = routes;
  // Replace rather than throw: a deny body or path may hold bytes that are not UTF-8.
  return j.dump(2, ' ', false, json::error_handler_t::replace) + "\n";
}

}  // namespace ratewall
