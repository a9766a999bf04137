#include "ratewall/proxy/upstream_addresses.hpp"

#include <boost/asio/io_context.hpp>

#include "ratewall/config/loader.hpp"

namespace ratewall {

std::vector<target_addresses> resolve_targets(const upstream_config& u, const std::string& source) {
  boost::asio::io_context ioc(1);
  boost::asio::ip::tcp::resolver resolver(ioc);
  std::vector<target_addresses> out(u.targets.size());
  for (std::size_t i = 0; i < u.targets.size(); ++i) {
    const endpoint& target = u.targets[i];
    boost::system::error_code ec;
    const auto results = resolver.resolve(target.host, std::to_string(target.port),
                                          boost::asio::ip::resolver_base::numeric_service, ec);
    for (const auto& entry : results) {
      out[i].push_back(entry.endpoint());
    }
    if (out[i].empty()) {
      const config_location at = i < u.targets_at.size() ? u.targets_at[i] : config_location{};
      throw config_error(source, at.line,
                         at.key_path.empty() ? "upstreams." + u.name + ".targets" : at.key_path,
                         "\"" + target.host + "\" gives no address" +
                             (ec ? " (" + ec.message() + ")" : std::string()) +
                             ": a target's name is looked up when the configuration is loaded, "
                             "at start and at each reload");
    }
  }
  return out;
}

}  // namespace ratewall
