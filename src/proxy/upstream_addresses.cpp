#include "ratewall/proxy/upstream_addresses.hpp"

#include <boost/asio/io_context.hpp>

#include "ratewall/config/loader.hpp"

namespace ratewall {

target_addresses interleave_families(const target_addresses& addresses) {
  if (addresses.empty()) {
    return addresses;
  }
  const bool first_v6 = addresses.front().address().is_v6();
  target_addresses first;
  target_addresses other;
  for (const auto& a : addresses) {
    (a.address().is_v6() == first_v6 ? first : other).push_back(a);
  }
  target_addresses out;
  out.reserve(addresses.size());
  for (std::size_t i = 0; i < first.size() || i < other.size(); ++i) {
    if (i < first.size()) {
      out.push_back(first[i]);
    }
    if (i < other.size()) {
      out.push_back(other[i]);
    }
  }
  return out;
}

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
    out[i] = interleave_families(out[i]);
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
