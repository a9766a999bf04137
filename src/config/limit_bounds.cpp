#include "ratewall/config/limit_bounds.hpp"

#include <limits>

namespace ratewall {

nanos bucket_depth(const rate_spec& rate, std::uint64_t units) {
  using u128 = unsigned __int128;
  if (rate.count == 0 || rate.period.count() <= 0) {
    return nanos{0};
  }
  const u128 product = static_cast<u128>(rate.period.count()) * units;
  const u128 depth = (product + rate.count - 1) / rate.count;
  constexpr auto k_max = static_cast<u128>(std::numeric_limits<nanos::rep>::max());
  return nanos{static_cast<nanos::rep>(depth > k_max ? k_max : depth)};
}

std::uint64_t bucket_units(algorithm algo, std::uint64_t burst) {
  switch (algo) {
    case algorithm::token_bucket:
      return burst;
    case algorithm::leaky_bucket:
      return burst == std::numeric_limits<std::uint64_t>::max() ? burst : burst + 1;
    default:
      return 0;
  }
}

}  // namespace ratewall
