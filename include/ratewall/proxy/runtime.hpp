#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "ratewall/admin/admin_server.hpp"
#include "ratewall/config/config.hpp"
#include "ratewall/core/clock.hpp"
#include "ratewall/proxy/gateway.hpp"
#include "ratewall/proxy/key_journal.hpp"
#include "ratewall/proxy/server.hpp"
#include "ratewall/proxy/state_snapshots.hpp"

namespace ratewall {

/// A configuration with a Redis store cannot run without RATEWALL_HASH_KEY: gateways that
/// share the Redis must name a client alike, and a secret drawn for one process cannot.
/// A RATEWALL_HASH_KEY or an admin token shorter than this is warned about at start: it can
/// be guessed (they are not refused: a test or a laptop may use a short one).
inline constexpr std::size_t k_short_secret_bytes = 16;

/// What stops a valid configuration from running in this environment: a Redis store without
/// the shared hashing secret or the password its password_env names, another secret holding
/// RATEWALL_HASH_KEY's value (admin token, Redis password, JWT secret), a snapshot path in a
/// folder that does not exist, an admin API other hosts could reach without a token, an access
/// log or keys file that could not be written (check_access_log, check_keys_file). "" when none;
/// else the error, naming the file and the line. The start, `ratewall check` and a reload all ask
/// it, so a file one passes the others do. `running`: the running configuration, on a reload;
/// an access log it already writes to is not asked about (the reload keeps it open).
std::string environment_error(const std::string& config_path, const config& cfg,
                              const config* running = nullptr);

/// The running gateway as an operator sees it: the configuration file, the proxy listeners,
/// the admin API, and the operations on them (reload, drain, log reopening). SIGHUP and
/// POST /admin/reload both end in reload().
class runtime final : public admin_backend {
 public:
  /// Builds the gateway for `cfg` (loaded from `config_path`) and opens the proxy and admin
  /// listeners; throws (std::system_error, std::runtime_error) naming what could not start.
  /// `hash_key`: RATEWALL_HASH_KEY, or a secret drawn for this process when it is not set.
  runtime(std::string config_path, config cfg, std::string hash_key);
  ~runtime() override;

  void start();

  /// Reads the file again. A valid file replaces the configuration for new requests (requests
  /// in flight finish on the old one); limits whose definition did not change keep their
  /// state. An invalid file changes nothing and the error is returned. Thread-safe.
  reload_result reload() override;
  std::shared_ptr<const gateway> current() override;
  readiness ready() override;
  boost::asio::awaitable<std::string> change_key(key_change change) override;

  /// Stops accepting and waits up to server.drain_timeout for requests in flight.
  bool drain();
  /// Stops the admin API and the proxy workers and joins their threads, whatever other work
  /// their loops still hold (Redis connections), then writes the last snapshot of the limit
  /// state (store.snapshot). Idempotent; the destructor calls it.
  void stop();
  /// Reopens the access log file (after rotation).
  void reopen_logs();

  server& listener() { return server_; }
  std::optional<std::uint16_t> admin_port() const;
  /// The address the admin API listens on ("" when it is off).
  std::string admin_host() const;
  const std::string& config_path() const { return config_path_; }

 private:
  /// store.snapshot's keeper, the snapshot loaded (nullptr: none configured, or a Redis store).
  std::unique_ptr<state_snapshots> make_snapshots();

  std::string config_path_;
  std::string hash_key_;
  steady_clock clock_;
  std::mutex reload_mutex_;           // reloads are serialised; only a reload writes current_
  mutable std::mutex current_mutex_;  // guards current_ for readers: held for a copy alone, so
                                      // the admin API (/healthz too) never waits on a reload
  // The API keys of every configuration: the current one's seed and the run-time changes,
  // which journal_ keeps (a file beside the configuration, or Redis).
  std::shared_ptr<key_registry> keys_;
  std::shared_ptr<const gateway> current_;
  std::unique_ptr<key_journal> journal_;
  // store.snapshot: the memory store's state, read at start and written every interval.
  std::unique_ptr<state_snapshots> snapshots_;
  server server_;
  std::unique_ptr<admin_server> admin_;
  std::atomic<bool> started_{false};  // set by the main thread, read by /readyz on the admin's
};

}  // namespace ratewall
