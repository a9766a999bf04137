#pragma once

// Runs a real ratewall server in the test process: configuration from YAML text, listening on
// 127.0.0.1 port 0, driven by the real clock, stopped when the harness goes out of scope.

#include <chrono>
#include <memory>
#include <mutex>
#include <string>

#include "ratewall/config/config.hpp"
#include "ratewall/core/clock.hpp"

namespace ratewall {
class server;
class gateway;
}  // namespace ratewall

namespace ratewall::testing {

class gateway_harness {
 public:
  /// `yaml` may use ${UPSTREAM} (replaced by 127.0.0.1:<upstream_port>); the listen addresses
  /// (server.listen, server.tls.listen) are forced to 127.0.0.1:0.
  gateway_harness(const std::string& yaml, std::uint16_t upstream_port);
  ~gateway_harness();

  std::uint16_t port() const;
  std::uint16_t tls_port() const;
  /// The configuration in force. A copy: the admin API's thread reads it while the test's thread
  /// reloads.
  std::shared_ptr<const gateway> current() const {
    const std::lock_guard lock(mutex_);
    return gateway_;
  }

  /// Replaces the configuration as SIGHUP does (listen address and threads stay). The harness
  /// keeps no reference to the old one, so it is freed once the workers have switched.
  void reload(const std::string& yaml);

  /// A graceful shutdown (server::drain): true when every connection ended within `timeout`.
  bool drain(std::chrono::milliseconds timeout);

 private:
  config parse(const std::string& yaml) const;

  std::uint16_t upstream_port_;
  steady_clock clock_;
  mutable std::mutex mutex_;
  std::shared_ptr<const gateway> gateway_;  // guarded by mutex_
  std::unique_ptr<server> server_;
};

/// Replaces every occurrence of `from` in `text`.
std::string replace_all(std::string text, const std::string& from, const std::string& to);

}  // namespace ratewall::testing
