#include "ratewall/proxy/runtime.hpp"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <vector>

#include "ratewall/admin/access_log.hpp"
#include "ratewall/config/loader.hpp"
#include "ratewall/core/log.hpp"
#include "ratewall/core/read_file.hpp"
#include "ratewall/limit/memory_store.hpp"
#include "ratewall/limit/snapshot.hpp"
#include "ratewall/redis/redis_store.hpp"
#include "ratewall/redis/url.hpp"
#include "ratewall/tls/server_tls.hpp"

namespace ratewall {

namespace {

std::string missing_hash_key_error(const std::string& config_path, const config& cfg) {
  return config_error(config_path, cfg.store.type_at.line, "",
                      "store.type is redis but RATEWALL_HASH_KEY is not set: set the same secret "
                      "on every gateway that shares the Redis (without it each gateway would "
                      "count a client under a name of its own)")
      .what();
}

/// Each secret has a value of its own. The loader refuses RATEWALL_HASH_KEY as the name of
/// another secret's variable; the same value under another name is the same secret all the
/// same: whoever held the admin token, the Redis password or the JWT secret would hold the
/// other too, and with RATEWALL_HASH_KEY the names behind every hash in logs, metrics and
/// stores.
std::string secret_reused_error(const std::string& config_path, const config& cfg,
                                const char* hash_key) {
  struct secret {
    std::string name;  // as the message names it
    std::string value;
    int line;
    std::string key;
  };
  std::vector<secret> secrets;
  const auto from_environment = [&](const std::string& variable, int line, std::string key) {
    const char* value = variable.empty() ? nullptr : std::getenv(variable.c_str());
    if (value != nullptr && *value != 0) {
      secrets.push_back({"the environment variable " + variable, value, line, std::move(key)});
    }
  };
  if (hash_key != nullptr && *hash_key != 0) {
    secrets.push_back({"RATEWALL_HASH_KEY", hash_key, 0, ""});
  }
  if (cfg.admin.enabled) {
    from_environment(cfg.admin.token_env, cfg.admin.token_env_at.line, "admin.token_env");
  }
  if (cfg.store.type == store_type::redis) {
    const redis_config& rc = cfg.store.redis;
    if (!rc.password_env.empty()) {
      from_environment(rc.password_env, rc.password_env_at.line, "store.redis.password_env");
    } else if (auto url = redis::parse_redis_url(rc.url, nullptr); url && !url->password.empty()) {
      secrets.push_back({"the password in it", url->password, rc.url_at.line, "store.redis.url"});
    }
  }
  if (const auto& jwt = cfg.identity.jwt;
      jwt && std::find(jwt->algorithms.begin(), jwt->algorithms.end(), jwt_algorithm::hs256) !=
                 jwt->algorithms.end()) {
    from_environment(jwt->hs256_secret_env, jwt->secret_at.line, "identity.jwt.hs256_secret_env");
  }
  for (std::size_t i = 1; i < secrets.size(); ++i) {
    for (std::size_t j = 0; j < i; ++j) {
      if (secrets[i].value != secrets[j].value) {
        continue;
      }
      const std::string other =
          secrets[j].key.empty() ? secrets[j].name : secrets[j].name + " (" + secrets[j].key + ")";
      return config_error(config_path, secrets[i].line, secrets[i].key,
                          secrets[i].name + " holds the same value as " + other +
                              ": whoever holds one holds the other; give each secret a value "
                              "of its own")
          .what();
    }
  }
  return {};
}

/// Two settings naming one file would write over each other, or over the configuration itself
/// (an access log's line appended to the YAML fails the next start).
std::string shared_file_error(const std::string& config_path, const config& cfg) {
  struct written {
    std::string path;
    int line;
    std::string key;
  };
  // The keys file first: the default one is written in no line, and a setting that names it
  // is the one to change.
  std::vector<written> files;
  if (cfg.store.type == store_type::memory) {
    files.push_back({keys_file_of(cfg, config_path), cfg.store.keys_file_at.line,
                     cfg.store.keys_file.empty() ? "" : "store.keys_file"});
  }
  if (cfg.log.access == access_log_sink::file) {
    files.push_back({resolve_config_path(cfg.log.access_path, config_path), cfg.log.access_at.line,
                     "log.access"});
  }
  if (cfg.store.type == store_type::memory && !cfg.store.snapshot_path.empty()) {
    files.push_back({resolve_config_path(cfg.store.snapshot_path, config_path),
                     cfg.store.snapshot_at.line, "store.snapshot.path"});
  }
  const auto same = [](const std::string& a, const std::string& b) {
    std::error_code ec;
    if (std::filesystem::exists(a, ec) && std::filesystem::exists(b, ec)) {
      return std::filesystem::equivalent(a, b, ec);  // links, hard links, `..` through a link
    }
    return std::filesystem::absolute(a, ec).lexically_normal() ==
           std::filesystem::absolute(b, ec).lexically_normal();
  };
  for (std::size_t i = 0; i < files.size(); ++i) {
    const auto refuse = [&](const std::string& what) -> std::string {
      return config_error(config_path, files[i].line, files[i].key,
                          files[i].path + " is " + what + ": each would write over the other")
          .what();
    };
    if (same(files[i].path, config_path)) {
      return refuse("the configuration file itself");
    }
    for (std::size_t j = 0; j < i; ++j) {
      if (same(files[i].path, files[j].path)) {
        return refuse("also " + (files[j].key.empty() ? "the API keys' file" : files[j].key));
      }
    }
  }
  return {};
}

/// The snapshot is never fatal once running (a full disk costs one write), but a folder that is
/// not there would lose every one of them, the last at shutdown included.
std::string snapshot_path_error(const std::string& config_path, const config& cfg) {
  if (cfg.store.snapshot_path.empty() || cfg.store.type != store_type::memory) {
    return {};
  }
  const std::string file = resolve_config_path(cfg.store.snapshot_path, config_path);
  // Written as FILE.PID.tmp beside it, then renamed over it; read at start.
  const write_obstacle obstacle =
      obstacle_to_writing(file, true, k_snapshot_longest_temporary_suffix);
  const std::string folder = std::filesystem::path(obstacle.path).parent_path().string();
  std::string what;
  switch (obstacle.what) {
    case write_obstacle::none:
      return {};
    case write_obstacle::no_folder:
      what = std::filesystem::exists(folder) ? folder + " is not a folder"
                                             : "the folder " + folder + " does not exist";
      break;
    case write_obstacle::directory:
    case write_obstacle::not_regular:
      what = file + " is not a regular file";  // a directory, a FIFO
      break;
    case write_obstacle::unreadable:
      what = file + " cannot be read: " + obstacle.error;
      break;
    case write_obstacle::not_readable:
      what = "the gateway's user may not read " + file + ": " + obstacle.error;
      break;
    case write_obstacle::folder_locked:
      what = "the gateway's user may not write in " + (folder.empty() ? "." : folder) + ": " +
             obstacle.error;
      break;
    case write_obstacle::name_too_long:
      what = "the name of " + file + " is too long for the temporary file written beside it (" +
             file + ".<process id>.tmp)";
      break;
  }
  return config_error(config_path, cfg.store.snapshot_at.line, "store.snapshot.path",
                      what + ": no snapshot could be written")
      .what();
}

}  // namespace

std::string environment_error(const std::string& config_path, const config& cfg,
                              const config* running) {
  const char* hash_key = std::getenv("RATEWALL_HASH_KEY");
  if (cfg.store.type == store_type::redis && (hash_key == nullptr || *hash_key == 0)) {
    return missing_hash_key_error(config_path, cfg);
  }
  if (cfg.store.type == store_type::redis) {
    try {
      redis_store::password_from_environment(cfg);
    } catch (const config_error& e) {
      return e.what();
    }
  }
  if (std::string why = secret_reused_error(config_path, cfg, hash_key); !why.empty()) {
    return why;
  }
  if (std::string why = snapshot_path_error(config_path, cfg); !why.empty()) {
    return why;
  }
  if (std::string why = shared_file_error(config_path, cfg); !why.empty()) {
    return why;
  }
  if (cfg.admin.enabled) {
    if (std::string why = admin_options::from_config(cfg.admin, "").refusal(); !why.empty()) {
      return config_error(config_path, cfg.admin.listen_at.line, "", why).what();
    }
  }
  try {
    if (running == nullptr || !keeps_access_log(running->log, cfg.log)) {
      check_access_log(cfg.log, config_path);
    }
    check_keys_file(cfg, config_path);
  } catch (const config_error& e) {
    return e.what();
  }
  return {};
}

runtime::runtime(std::string config_path, config cfg, std::string hash_key)
    : config_path_(std::move(config_path)),
      hash_key_(std::move(hash_key)),
      keys_(std::make_shared<key_registry>(hash_key_)),
      current_(std::make_shared<const gateway>(std::move(cfg), clock_, hash_key_, nullptr, keys_)),
      journal_(make_key_journal(current_->cfg(), config_path_, current_->limits().shared_store(),
                                keys_)),
      snapshots_(make_snapshots()),
      server_(current_) {
  const config& c = current_->cfg();
  set_log_level(c.log.level);
  if (c.admin.enabled) {
    admin_options options = admin_options::from_config(c.admin, hash_key_);
    if (!options.why.empty()) {
      log_info(options.why);
    }
    if (!options.token.empty() && options.token.size() < k_short_secret_bytes) {
      log_warn("the admin token in " + c.admin.token_env + " has " +
               std::to_string(options.token.size()) +
               " bytes: a short token can be guessed; use 32 random bytes (openssl rand -hex 32)");
    }
    admin_ = std::make_unique<admin_server>(std::move(options), *this, process_metrics());
  }
}

runtime::~runtime() {
  stop();
}

std::unique_ptr<state_snapshots> runtime::make_snapshots() {
  const store_config& c = current_->cfg().store;
  auto memory = std::dynamic_pointer_cast<memory_store>(current_->limits().shared_store());
  if (c.snapshot_path.empty() || !memory) {
    return nullptr;
  }
  auto snapshots = std::make_unique<state_snapshots>(
      std::move(memory), resolve_config_path(c.snapshot_path, config_path_), c.snapshot_interval,
      clock_, hash_key_);
  // Before the listeners open: the first request already sees the restored state.
  snapshots->load();
  return snapshots;
}

void runtime::stop() {
  if (admin_) {
    admin_->stop();
  }
  server_.stop();
  if (snapshots_) {
    snapshots_->stop();
  }
}

void runtime::start() {
  if (snapshots_) {
    snapshots_->start();
  }
  server_.start();
  if (admin_) {
    admin_->start();
  }
  started_.store(true, std::memory_order_release);
}

reload_result runtime::reload() {
  std::lock_guard lock(reload_mutex_);
  const auto refuse = [](const std::string& error) -> reload_result {
    log_error("reload refused, the running configuration stays: " + error);
    process_metrics().count_reload(false);
    return {false, error};
  };
  config cfg;
  try {
    cfg = load_config_file(config_path_);
  } catch (const config_error& e) {
    return refuse(e.what());
  }
  for (const std::string& warning : cfg.warnings) {
    log_warn("reload: " + warning);
  }
  // What a start would refuse in this environment is refused here too, the settings that take
  // effect only on restart included (store.type redis without the process's RATEWALL_HASH_KEY,
  // a new store.keys_file): else a reload would say yes to a file the next start (and
  // `ratewall check`) says no to.
  if (std::string error = environment_error(config_path_, cfg, &current_->cfg()); !error.empty()) {
    return refuse(error);
  }
  if (keeps_access_log(current_->cfg().log, cfg.log)) {
    // Kept open by this reload: what a rotation may have moved away (and SIGUSR1 opens again)
    // must not refuse a limit's change. The next start would refuse it: said, not refused.
    try {
      check_access_log(cfg.log, config_path_);
    } catch (const config_error& e) {
      log_warn(std::string("reload: the access log is kept open, but the next start would "
                           "refuse it: ") +
               e.what());
    }
  }
  const config& running = current_->cfg();
  auto same_endpoint = [](const endpoint& a, const endpoint& b) {
    return a.host == b.host && a.port == b.port;
  };
  const bool tls_listener_changed =
      cfg.server.tls.has_value() != running.server.tls.has_value() ||
      (cfg.server.tls && !same_endpoint(cfg.server.tls->listen, running.server.tls->listen));
  // Listeners and threads are made once, and the admin token is read at start; everything else
  // takes effect now, the certificates and min_version of a TLS listener included, and the admin
  // API's other settings (allowed_hosts, header_timeout, max_connections, top_window), whatever
  // else the file changes.
  const auto same_optional = [&](const std::optional<endpoint>& a,
                                 const std::optional<endpoint>& b) {
    return a.has_value() == b.has_value() && (!a || same_endpoint(*a, *b));
  };
  if (!same_endpoint(cfg.admin.listen, running.admin.listen) ||
      cfg.admin.enabled != running.admin.enabled ||
      cfg.admin.token_env != running.admin.token_env ||
      !same_optional(cfg.admin.listen_without_token, running.admin.listen_without_token)) {
    log_warn(
        "reload: admin.listen, admin.enabled, admin.token_env and admin.listen_without_token "
        "take effect on restart");
    cfg.admin.listen = running.admin.listen;
    cfg.admin.enabled = running.admin.enabled;
    cfg.admin.token_env = running.admin.token_env;
    cfg.admin.listen_without_token = running.admin.listen_without_token;
  }
  std::shared_ptr<const server_tls> kept_tls;
  if (!same_endpoint(cfg.server.listen, running.server.listen) ||
      cfg.server.plain_listener != running.server.plain_listener || tls_listener_changed ||
      cfg.server.threads != running.server.threads) {
    log_warn(
        "reload: server.listen, server.threads and server.tls.listen (and adding or removing "
        "server.tls) take effect on restart");
    cfg.server.listen = running.server.listen;
    cfg.server.plain_listener = running.server.plain_listener;
    cfg.server.threads = running.server.threads;
    if (!running.server.tls) {
      if (cfg.server.tls) {
        // A TLS listener added is served from the next start, which must find its files:
        // they are loaded now, as `check` loads them, and files that do not load refuse it.
        try {
          server_tls::load(*cfg.server.tls, cfg.server.http2.enabled, cfg.source);
        } catch (const config_error& e) {
          return refuse(e.what());
        }
      }
      cfg.server.tls.reset();
    } else if (!cfg.server.tls) {
      // The listener serves on, as it is, until the restart: its files are not loaded again,
      // which an operator who removed the block may have moved or deleted (each reload was then
      // refused). Its ALPN offer is made with its certificates: HTTP/2 on or off waits too.
      cfg.server.tls = running.server.tls;
      kept_tls = current_->tls();
      if (cfg.server.http2.enabled != running.server.http2.enabled) {
        log_warn(
            "reload: server.http2.enabled takes effect on restart while the TLS listener the "
            "file removes serves on");
        cfg.server.http2.enabled = running.server.http2.enabled;
      }
    } else {
      cfg.server.tls->listen = running.server.tls->listen;
    }
  }
  if (cfg.store.snapshot_path != running.store.snapshot_path ||
      cfg.store.snapshot_interval != running.store.snapshot_interval) {
    log_warn("reload: store.snapshot changes take effect on restart");
  }
  if (cfg.store.type != running.store.type || cfg.store.keys_file != running.store.keys_file ||
      (cfg.store.type == store_type::redis && cfg.store.redis.url != running.store.redis.url)) {
    log_warn("reload: run-time API keys stay where they were kept at start (" + journal_->where() +
             "); a new store.type, store.keys_file or Redis URL for them " +
             "takes effect on restart");
  }
  std::shared_ptr<const gateway> next;
  try {
    // Also loads the certificates again: one that does not load refuses the reload like a bad
    // file (config_error), and the running gateway keeps its own.
    next = std::make_shared<const gateway>(std::move(cfg), clock_, hash_key_, current_.get(),
                                           nullptr, std::move(kept_tls));
  } catch (const std::exception& e) {
    return refuse(e.what());
  }
  {
    std::lock_guard lock(current_mutex_);
    current_ = next;
  }
  if (snapshots_) {
    // A store whose settings changed is a new one: written from now on, not the old one, which
    // empties as its last requests end and would be written over the good file.
    snapshots_->follow(std::dynamic_pointer_cast<memory_store>(next->limits().shared_store()));
  }
  set_log_level(next->cfg().log.level);
  server_.reload(next);
  process_metrics().count_reload(true);
  log_info("reloaded " + config_path_);
  return {true, {}};
}

boost::asio::awaitable<std::string> runtime::change_key(key_change change) {
  co_return co_await journal_->record(std::move(change));
}

std::shared_ptr<const gateway> runtime::current() {
  std::lock_guard lock(current_mutex_);
  return current_;
}

readiness runtime::ready() {
  if (!started_.load(std::memory_order_acquire)) {
    return {false, "starting"};
  }
  if (server_.stopping()) {
    return {false, "draining"};
  }
  if (std::string why; !journal_->ready(&why)) {
    return {false, why};
  }
  auto gw = current();
  const bool redis = gw->cfg().store.type == store_type::redis;
  return {true, std::string("listening; store: ") + (redis ? "redis" : "memory")};
}

bool runtime::drain() {
  nanos timeout = current()->cfg().server.drain_timeout;
  return server_.drain(timeout);
}

void runtime::reopen_logs() {
  if (!current()->log()->reopen()) {
    log_error("could not reopen the access log");
  }
}

std::string runtime::admin_host() const {
  return admin_ ? admin_->options().listen.host : std::string();
}

std::optional<std::uint16_t> runtime::admin_port() const {
  if (!admin_) {
    return std::nullopt;
  }
  return admin_->port();
}

}  // namespace ratewall
