#pragma once

#include <memory>
#include <mutex>
#include <string>

#include "ratewall/config/config.hpp"
#include "ratewall/core/clock.hpp"
#include "ratewall/proxy/gateway.hpp"
#include "ratewall/proxy/server.hpp"

namespace ratewall {

struct reload_result {
  bool ok = false;
  std::string error;  // the config error (file:line: key: message) when !ok
};

/// The running gateway as an operator sees it: the configuration file, the server, and the
/// operations on them (reload, drain). SIGHUP and the admin API both call reload().
class runtime {
 public:
  /// Builds the gateway for `cfg` (loaded from `config_path`) and opens the listeners.
  runtime(std::string config_path, config cfg, std::string hash_key);

  void start() { server_.start(); }

  /// Reads the file again. A valid file replaces the configuration for new requests (requests
  /// in flight finish on the old one); limits whose definition did not change keep their
  /// state. An invalid file changes nothing and the error is returned. Thread-safe.
  reload_result reload();

  /// Stops accepting and waits up to server.drain_timeout for requests in flight.
  bool drain();

  std::shared_ptr<const gateway> current() const;
  server& listener() { return server_; }
  const std::string& config_path() const { return config_path_; }

 private:
  std::string config_path_;
  std::string hash_key_;
  steady_clock clock_;
  mutable std::mutex mutex_;  // reloads are serialised; guards current_
  std::shared_ptr<const gateway> current_;
  server server_;
};

}  // namespace ratewall
