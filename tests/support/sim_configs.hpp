#pragma once

// Configurations for the `ratewall simulate` tests, unit and integration.

#include <string>

namespace ratewall::test {

/// One route, /api, limited per client address by a token bucket of `burst` refilling at 1/s.
inline std::string bucket_config(int burst) {
  return R"(
upstreams:
  api: { targets: [127.0.0.1:9] }
routes:
  - name: api
    match: { path_prefix: /api }
    upstream: api
    identify_by: [ip]
    limits:
      - { name: burst, rate: 1/s, burst: )" +
         std::to_string(burst) + " }\n";
}

}  // namespace ratewall::test
