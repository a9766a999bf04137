#include "support/gateway_harness.hpp"

#include "ratewall/config/loader.hpp"
#include "ratewall/proxy/gateway.hpp"
#include "ratewall/proxy/server.hpp"

namespace ratewall::testing {

std::string replace_all(std::string text, const std::string& from, const std::string& to) {
  for (std::size_t pos = text.find(from); pos != std::string::npos;
       pos = text.find(from, pos + to.size())) {
    text.replace(pos, from.size(), to);
  }
  return text;
}

config gateway_harness::parse(const std::string& yaml) const {
  config cfg = parse_config(
      replace_all(yaml, "${UPSTREAM}", "127.0.0.1:" + std::to_string(upstream_port_)), "test.yaml");
  cfg.server.listen = endpoint{"127.0.0.1", 0};
  if (cfg.server.tls) {
    cfg.server.tls->listen = endpoint{"127.0.0.1", 0};
  }
  return cfg;
}

gateway_harness::gateway_harness(const std::string& yaml, std::uint16_t upstream_port)
    : upstream_port_(upstream_port) {
  gateway_ = std::make_shared<const gateway>(parse(yaml), clock_, "test-hash-key");
  server_ = std::make_unique<server>(gateway_);
  server_->start();
}

gateway_harness::~gateway_harness() {
  server_->stop();
}

void gateway_harness::reload(const std::string& yaml) {
  config cfg = parse(yaml);
  const std::shared_ptr<const gateway> previous = current();
  cfg.server.threads = previous->cfg().server.threads;
  auto next =
      std::make_shared<const gateway>(std::move(cfg), clock_, "test-hash-key", previous.get());
  server_->reload(next);
  const std::lock_guard lock(mutex_);
  gateway_ = std::move(next);
}

bool gateway_harness::drain(std::chrono::milliseconds timeout) {
  return server_->drain(timeout);
}

std::uint16_t gateway_harness::port() const {
  return server_->port();
}

std::uint16_t gateway_harness::tls_port() const {
  return server_->tls_port();
}

}  // namespace ratewall::testing
