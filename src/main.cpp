// ratewall: arguments, configuration, signals, run. Everything else lives in ratewall_core.

#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <iostream>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "ratewall/admin/access_log.hpp"
#include "ratewall/admin/admin_server.hpp"
#include "ratewall/config/loader.hpp"
#include "ratewall/core/hash.hpp"
#include "ratewall/core/log.hpp"
#include "ratewall/http/jwt.hpp"
#include "ratewall/proxy/runtime.hpp"
#include "ratewall/proxy/upstream_addresses.hpp"
#include "ratewall/redis/redis_store.hpp"
#include "ratewall/sim/simulate.hpp"
#include "ratewall/tls/server_tls.hpp"
#include "ratewall/tls/upstream_tls.hpp"

namespace {

constexpr const char* k_usage =
    "usage: ratewall --config FILE      run the gateway (SIGHUP reloads FILE, SIGTERM drains)\n"
    "       ratewall check FILE         validate a configuration (exit 0 valid, 2 invalid;\n"
    "                                   check --config FILE too)\n"
    "       ratewall simulate --config FILE --trace TRACE [--format csv|access-log|nginx]\n"
    "                         [--compare OTHER.yaml] [--html FILE] [--json] [--summary]\n"
    "                                   replay a trace offline, print each decision\n"
    "       ratewall --version\n"
    "\n"
    "environment: RATEWALL_HASH_KEY  secret for the keyed hash that names clients (set the\n"
    "                                same value on every instance that shares a store;\n"
    "                                required with store.type: redis)\n";

// Subjects are named by a keyed hash so that no raw API key reaches logs or stores. Without a
// configured secret a random one is drawn: fine for one instance with its memory store.
std::string hash_key_from_environment() {
  if (const char* key = std::getenv("RATEWALL_HASH_KEY"); key && *key) {
    return key;
  }
  std::random_device rd;
  std::string key;
  for (int i = 0; i < 8; ++i) {
    auto word = rd();
    key.append(reinterpret_cast<const char*>(&word), sizeof word);
  }
  return key;
}

int check(const std::string& path) {
  try {
    const ratewall::config cfg = ratewall::load_config_file(path);
    // The Redis scripts compute in doubles: limits the loader accepts may still be too large
    // for them, which `run` would only find when it builds the store.
    if (cfg.store.type == ratewall::store_type::redis) {
      ratewall::redis_store::validate(cfg);
    }
    // The JWT secret and key set, as a start or reload would load them.
    if (cfg.identity.jwt) {
      ratewall::jwt_verifier(*cfg.identity.jwt, cfg.source);
    }
    // The certificate and key files, as a start or reload would load them.
    if (cfg.server.tls) {
      ratewall::server_tls::load(*cfg.server.tls, cfg.server.http2.enabled, cfg.source);
    }
    for (const auto& u : cfg.upstreams) {
      if (u.https) {
        ratewall::upstream_tls::load(u, cfg.source);
      }
    }
    // The targets' names, as a start or reload would look them up.
    for (const auto& u : cfg.upstreams) {
      ratewall::resolve_targets(u, cfg.source);
    }
    // Last: what the file says is checked whatever the environment it is checked in.
    if (std::string why = ratewall::environment_error(path, cfg); !why.empty()) {
      std::cerr << why << "\n";
      return 2;
    }
    for (const std::string& warning : cfg.warnings) {
      std::cerr << "warning: " << warning << "\n";
    }
    std::cout << path << ": ok\n";
    return 0;
  } catch (const ratewall::config_error& e) {
    std::cerr << e.what() << "\n";
    return 2;
  } catch (const std::invalid_argument& e) {
    std::cerr << e.what() << "\n";
    return 2;
  }
}

int run(const std::string& path) {
  // A reload or a log rotation asked for while the gateway starts must not end the process
  // (their default action): reading the configuration takes seconds with a million api_keys,
  // and the runtime's start may wait on a snapshot or on Redis. Both are caught from here and
  // handled once the runtime is up.
  boost::asio::io_context signals_ioc(1);
  boost::asio::signal_set reload_signal(signals_ioc, SIGHUP);
  boost::asio::signal_set reopen_signal(signals_ioc, SIGUSR1);
  // A file size limit (RLIMIT_FSIZE) reached by a write (the snapshot, the keys file, the
  // access log) fails that write with EFBIG, which each reports; it must not kill the gateway.
  std::signal(SIGXFSZ, SIG_IGN);
  // Nor a write to a pipe or FIFO whose reader has gone (the access log's, standard output's
  // or standard error's): it fails with EPIPE, which the access log reports. Sockets are
  // written with MSG_NOSIGNAL; nginx ignores SIGPIPE too.
  std::signal(SIGPIPE, SIG_IGN);
  ratewall::config cfg;
  try {
    cfg = ratewall::load_config_file(path);
  } catch (const ratewall::config_error& e) {
    std::cerr << e.what() << "\n";
    return 2;
  }
  // Gateways sharing Redis must name a client alike, so the secret cannot be drawn at random.
  const char* hash_key = std::getenv("RATEWALL_HASH_KEY");
  const bool hash_key_shared = hash_key != nullptr && *hash_key != 0;
  if (std::string why = ratewall::environment_error(path, cfg); !why.empty()) {
    std::cerr << why << "\n";
    return 2;
  }
  for (const std::string& warning : cfg.warnings) {
    ratewall::log_warn(warning);
  }
  if (hash_key_shared && std::strlen(hash_key) < ratewall::k_short_secret_bytes) {
    ratewall::log_warn("RATEWALL_HASH_KEY has " + std::to_string(std::strlen(hash_key)) +
                       " bytes: a short secret can be guessed, and with it the hashes in logs, "
                       "metrics and stores name their clients again; use 32 random bytes "
                       "(openssl rand -hex 32)");
  }
  if (!cfg.store.snapshot_path.empty() && !hash_key_shared) {
    ratewall::log_warn(
        "store.snapshot: RATEWALL_HASH_KEY is not set, so API keys, users and descriptors are "
        "named under a secret drawn for this process: after a restart only client addresses' "
        "limits are restored (set RATEWALL_HASH_KEY, the same at every start, to keep them all)");
  }
  try {
    boost::asio::signal_set stop_signals(signals_ioc, SIGINT, SIGTERM);
    ratewall::runtime rt(path, std::move(cfg), hash_key_from_environment());
    stop_signals.async_wait([&](const boost::system::error_code& ec, int sig) {
      if (!ec) {
        ratewall::log_info(std::string("signal ") + ::strsignal(sig) + ": draining");
        reload_signal.cancel();
        reopen_signal.cancel();
      }
    });
    std::function<void()> wait_reopen = [&] {
      reopen_signal.async_wait([&](const boost::system::error_code& ec, int) {
        if (!ec) {
          rt.reopen_logs();  // after log rotation moved the file away
          wait_reopen();
        }
      });
    };
    wait_reopen();
    std::function<void()> wait_reload = [&] {
      reload_signal.async_wait([&](const boost::system::error_code& ec, int) {
        if (!ec) {
          rt.reload();
          wait_reload();
        }
      });
    };
    wait_reload();
    rt.start();
    // Held: the admin thread may already reload and free the configuration current() gave.
    const auto gw = rt.current();
    const auto& s = gw->cfg().server;
    std::string admin = "admin off";
    if (auto port = rt.admin_port()) {
      admin = "admin on " + rt.admin_host() + ":" + std::to_string(*port);
    }
    // "listening on HOST:PORT" names the plain listener, or the TLS one when it is the only one.
    const std::string plain = s.listen.host + ":" + std::to_string(rt.listener().port());
    const std::string tls =
        s.tls ? s.tls->listen.host + ":" + std::to_string(rt.listener().tls_port()) : "";
    std::string listening = s.plain_listener ? plain : tls + " (TLS only)";
    listening += " with " + std::to_string(s.threads) + " thread(s), ";
    if (s.plain_listener && s.tls) {
      listening += "TLS on " + tls + ", ";
    }
    ratewall::log_info("ratewall listening on " + listening + admin + ", config " + path);
    signals_ioc.run();  // until SIGINT or SIGTERM
    bool clean = rt.drain();
    rt.stop();  // "stopped" only once every thread has ended
    ratewall::log_info(clean ? "stopped"
                             : "stopped; connections still open were cut at the "
                               "drain timeout");
    return 0;
  } catch (const ratewall::config_error& e) {
    // A certificate or key file that does not load: as invalid as a bad line in the file.
    std::cerr << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    ratewall::log_error(std::string("cannot start: ") + e.what());
    return 1;
  }
}

// `--config FILE`, `-c FILE` or `--config=FILE` at argv[i]: the file, with `i` on the last
// argument read; nullopt (and `i` as it was) for anything else.
std::optional<std::string> config_option(int argc, char** argv, int& i) {
  const std::string_view arg = argv[i];
  if ((arg == "--config" || arg == "-c") && i + 1 < argc) {
    return argv[++i];
  }
  if (arg.starts_with("--config=")) {
    return std::string(arg.substr(9));
  }
  return std::nullopt;
}

}  // namespace

int main(int argc, char** argv) {
  std::string config_path;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--version" || arg == "-V") {
      std::cout << "ratewall " << RATEWALL_VERSION << "\n";
      return 0;
    }
    if (arg == "--help" || arg == "-h") {
      std::cout << k_usage;
      return 0;
    }
    if (arg == "check" && i == 1) {
      // `check FILE`, and `check --config FILE` as the gateway itself is started.
      int next = i + 1;
      if (auto file = next < argc ? config_option(argc, argv, next) : std::nullopt;
          file && next + 1 == argc) {
        return check(*file);
      }
      if (argc == 3 && !std::string_view(argv[2]).starts_with("-")) {
        return check(argv[2]);
      }
      std::cerr << k_usage;
      return 2;
    }
    if (arg == "simulate" && i == 1) {
      std::vector<std::string_view> rest(argv + 2, argv + argc);
      return ratewall::simulate_command(rest, std::cout, std::cerr);
    }
    if (auto file = config_option(argc, argv, i)) {
      config_path = std::move(*file);
      continue;
    }
    std::cerr << "ratewall: unexpected argument '" << arg << "'\n" << k_usage;
    return 2;
  }
  if (config_path.empty()) {
    std::cerr << k_usage;
    return 2;
  }
  return run(config_path);
}
