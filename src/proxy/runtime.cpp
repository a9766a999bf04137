#include "ratewall/proxy/runtime.hpp"

#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "ratewall/admin/access_log.hpp"
#include "ratewall/config/loader.hpp"
#include "ratewall/core/log.hpp"
#include "ratewall/limit/memory_store.hpp"
#include "ratewall/redis/redis_store.hpp"
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

/// The loader refuses a secret variable named RATEWALL_HASH_KEY; the same value under another
/// name is the same secret: whoever holds the admin token, the Redis password or the JWT
/// secret could name the clients behind every hash in logs, metrics and stores.
std::string secret_reused_error(const std::string& config_path, const config& cfg,
                                const char* hash_key) {
  if (hash_key == nullptr || *hash_key == 0) {
    return {};
  }
  struct secret {
    bool used;
    std::string variable;
    int line;
    const char* key;
  };
  const secret secrets[] = {
      {cfg.admin.enabled, cfg.admin.token_env, cfg.admin.token_env_at.line, "admin.token_env"},
      {cfg.store.type == store_type::redis, cfg.store.redis.password_env,
       cfg.store.redis.password_env_at.line, "store.redis.password_env"},
      {cfg.identity.jwt.has_value(), cfg.identity.jwt ? cfg.identity.jwt->hs256_secret_env : "",
       cfg.identity.jwt ? cfg.identity.jwt->secret_at.line : 0, "identity.jwt.hs256_secret_env"},
  };
  for (const secret& s : secrets) {
    const char* value = s.used && !s.variable.empty() ? std::getenv(s.variable.c_str()) : nullptr;
    if (value != nullptr && std::strcmp(value, hash_key) == 0) {
      return config_error(config_path, s.line, s.key,
                          "the environment variable " + s.variable +
                              " holds the same value as RATEWALL_HASH_KEY: whoever holds one "
                              "could name the clients behind the hashes in logs, metrics and "
                              "stores; give each secret a value of its own")
          .what();
    }
  }
  return {};
}

}  // namespace

std::string environment_error(const std::string& config_path, const config& cfg) {
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
  if (!cfg.store.snapshot_path.empty() && cfg.store.type == store_type::memory) {
    // The snapshot is never fatal once running (a full disk costs one write), but a folder
    // that is not there would lose every one of them, the last at shutdown included.
    const std::filesystem::path file(resolve_config_path(cfg.store.snapshot_path, config_path));
    std::error_code ec;
    if (file.has_parent_path() && !std::filesystem::is_directory(file.parent_path(), ec)) {
      return config_error(config_path, cfg.store.snapshot_at.line, "store.snapshot.path",
                          "the folder " + file.parent_path().string() +
                              " does not exist: no snapshot could be written")
          .what();
    }
  }
  if (cfg.admin.enabled) {
    if (std::string why = admin_options::from_config(cfg.admin, "").refusal(); !why.empty()) {
      return config_error(config_path, cfg.admin.listen_at.line, "", why).what();
    }
  }
  try {
    check_access_log(cfg.log, config_path);
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
  if (std::string error = environment_error(config_path_, cfg); !error.empty()) {
    return refuse(error);
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
      // refused). Unless HTTP/2 was switched: the certificates' ALPN offer changes with it.
      cfg.server.tls = running.server.tls;
      if (cfg.server.http2.enabled == running.server.http2.enabled) {
        kept_tls = current_->tls();
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
