#include "ratewall/proxy/runtime.hpp"

#include "ratewall/config/loader.hpp"
#include "ratewall/core/log.hpp"

namespace ratewall {

runtime::runtime(std::string config_path, config cfg, std::string hash_key)
    : config_path_(std::move(config_path)),
      hash_key_(std::move(hash_key)),
      current_(std::make_shared<const gateway>(std::move(cfg), clock_, hash_key_)),
      server_(current_) {}

reload_result runtime::reload() {
  std::lock_guard lock(mutex_);
  config cfg;
  try {
    cfg = load_config_file(config_path_);
  } catch (const config_error& e) {
    log_error(std::string("reload refused, the running configuration stays: ") + e.what());
    return {false, e.what()};
  }
  const server_config& running = current_->cfg().server;
  if (cfg.server.listen.host != running.listen.host ||
      cfg.server.listen.port != running.listen.port || cfg.server.threads != running.threads) {
    // Listeners and threads are made once; everything else takes effect now.
    log_warn("reload: server.listen and server.threads changes take effect after a restart");
    cfg.server.listen = running.listen;
    cfg.server.threads = running.threads;
  }
  std::shared_ptr<const gateway> next;
  try {
    next = std::make_shared<const gateway>(std::move(cfg), clock_, hash_key_, current_.get());
  } catch (const std::exception& e) {
    log_error(std::string("reload refused, the running configuration stays: ") + e.what());
    return {false, e.what()};
  }
  current_ = next;
  server_.reload(next);
  log_info("reloaded " + config_path_);
  return {true, {}};
}

bool runtime::drain() {
  nanos timeout = current()->cfg().server.drain_timeout;
  return server_.drain(timeout);
}

std::shared_ptr<const gateway> runtime::current() const {
  std::lock_guard lock(mutex_);
  return current_;
}

}  // namespace ratewall
