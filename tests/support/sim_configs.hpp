#pragma once

// Configurations for the `ratewall simulate` tests, unit and integration.

#include <string>

namespace ratewall::test {

/// One route, /api, identified by the client address, with `limit` (a YAML flow mapping) as
/// its one limit and `route_keys` (YAML lines at the route's indentation) added to it.
inline std::string one_route_config(const std::string& limit, const std::string& route_keys = "") {
  return R"(
upstreams:
  api: { targets: [127.0.0.1:9] }
routes:
  - name: api
    match: { path_prefix: /api }
    upstream: api
    identify_by: [ip]
)" + route_keys +
         "    limits:\n      - " + limit + "\n";
}

/// One route, /api, limited per client address by a token bucket of `burst` refilling at 1/s.
inline std::string bucket_config(int burst) {
  return one_route_config("{ name: burst, rate: 1/s, burst: " + std::to_string(burst) + " }");
}

}  // namespace ratewall::test
