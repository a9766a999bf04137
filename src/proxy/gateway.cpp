#include "ratewall/proxy/gateway.hpp"

namespace ratewall {

gateway::gateway(config cfg, const clock& clk, std::string hash_key, const gateway* previous)
    : cfg_(std::move(cfg)),
      clock_(clk),
      router_(cfg_),
      identity_(cfg_, std::move(hash_key)),
      limiter_(std::make_unique<limiter>(cfg_, clk)) {}

}  // namespace ratewall
