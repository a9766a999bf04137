#pragma once

// What tests need to put an admin server in front of a gateway: options for a loopback
// listener, and the admin API's view of a gateway_harness.

#include <memory>
#include <string>

#include <boost/asio/awaitable.hpp>

#include "ratewall/admin/admin_server.hpp"
#include "support/gateway_harness.hpp"

namespace ratewall::testing {

/// An admin listener on 127.0.0.1, any free port; `token` "" for none.
inline admin_options loopback(std::string token = "") {
  admin_options o;
  o.listen = endpoint{"127.0.0.1", 0};
  o.token = std::move(token);
  o.token_env = "RATEWALL_ADMIN_TOKEN";
  o.hash_key = "hash-key";
  return o;
}

/// The harness's current gateway, always ready; reloads and key changes are not part of the
/// tests that use it.
class harness_backend final : public admin_backend {
 public:
  explicit harness_backend(const gateway_harness& gw) : gw_(gw) {}
  std::shared_ptr<const gateway> current() override { return gw_.current(); }
  reload_result reload() override { return {false, "not in this test"}; }
  readiness ready() override { return {true, "up"}; }
  boost::asio::awaitable<std::string> change_key(key_change) override {
    co_return "not in this test";
  }

 private:
  const gateway_harness& gw_;
};

}  // namespace ratewall::testing
