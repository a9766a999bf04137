// admin_options::from_config: where the admin API listens, with and without its token.

#include <doctest/doctest.h>
#include <stdlib.h>

#include "ratewall/admin/admin_server.hpp"

using namespace ratewall;

TEST_CASE("admin.listen_without_token: every interface only with a token, loopback without") {
  admin_config cfg;
  cfg.listen = endpoint{"0.0.0.0", 9090};
  cfg.listen_without_token = endpoint{"127.0.0.1", 9090};
  cfg.token_env = "RATEWALL_TEST_ADMIN_TOKEN_OPTIONS";

  ::unsetenv(cfg.token_env.c_str());
  admin_options without = admin_options::from_config(cfg, "k");
  CHECK(without.listen.host == "127.0.0.1");
  CHECK(without.token.empty());
  CHECK(without.why.find("only (loopback): RATEWALL_TEST_ADMIN_TOKEN_OPTIONS is not set") !=
        std::string::npos);

  ::setenv(cfg.token_env.c_str(), "t0ken", 1);
  admin_options with = admin_options::from_config(cfg, "k");
  CHECK(with.listen.host == "0.0.0.0");
  CHECK(with.token == "t0ken");
  CHECK(with.why.find("is set, so it is reachable from other hosts") != std::string::npos);
  ::unsetenv(cfg.token_env.c_str());

  // A loopback listen has nothing to choose: no message.
  cfg.listen = endpoint{"127.0.0.1", 9090};
  CHECK(admin_options::from_config(cfg, "k").why.empty());
}
