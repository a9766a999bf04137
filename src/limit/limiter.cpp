#include "ratewall/limit/limiter.hpp"

#include <algorithm>
#include <set>
#include <stdexcept>
#include <utility>

#include "ratewall/limit/memory_store.hpp"

namespace ratewall {

namespace {

policy resolve(const route_config& route, const limit_config& limit, const std::string* plan,
               store_failure default_on_error) {
  const limit_override* values = nullptr;
  if (plan != nullptr) {
    auto it = limit.plans.find(*plan);
    if (it != limit.plans.end()) {
      values = &it->second;
    }
  }
  try {
    return resolve_policy(limit, values, route.shadow, default_on_error);
  } catch (const std::invalid_argument& e) {
    std::string where = "route '" + route.name + "' ";
    if (values != nullptr) {
      where += "(plan '" + *plan + "') ";
    }
    throw std::invalid_argument(where + e.what());
  }
}

// The limit's own values and those of every plan that resolves differently: the same limit in
// two configurations has the same signature, whatever else changed around it.
std::uint64_t signature_of(const route_config& route, const limit_config& limit, const policy& own,
                           store_failure default_on_error) {
  signature_builder sig;
  sig.add(own);
  for (const auto& [plan, values] : limit.plans) {
    const policy p = resolve(route, limit, &plan, default_on_error);
    if (!same_state_meaning(p, own)) {
      sig.add(plan);
      sig.add(p);
    }
  }
  return sig.value();
}

}  // namespace

limiter::limiter(const config& cfg, const clock& clk)
    : limiter(cfg, clk, std::make_shared<memory_store>(cfg)) {}

limiter::limiter(const config& cfg, const clock& clk, std::shared_ptr<store> backing,
                 std::vector<std::shared_ptr<const adaptive_route>> adaptive)
    : clock_(clk), store_(std::move(backing)) {
  const store_failure on_error = cfg.store.redis.on_error;
  for (const route_config& route : cfg.routes) {
    // A lease names the limits holding slots in one 64-bit mask.
    if (route.limits.size() > 64) {
      throw std::invalid_argument("route '" + route.name + "': more than 64 limits");
    }
    route_entry& entry = routes_.emplace_back();
    entry.cost = route.cost;
    if (const std::size_t index = routes_.size() - 1; index < adaptive.size()) {
      entry.adaptive = std::move(adaptive[index]);
    }
    entry.from_response = route.cost_from_response.has_value();
    for (const limit_config& limit : route.limits) {
      // A debt has no meaning for them (the loader refuses them with the file and line).
      if (entry.from_response &&
          (limit.algo == algorithm::sliding_window_log || limit.algo == algorithm::concurrency)) {
        throw std::invalid_argument("route '" + route.name + "' limit '" + limit.name +
                                    "': cost_from_response cannot charge a " +
                                    std::string(to_string(limit.algo)) + " limit");
      }
    }
    entry.method_cost.assign(route.method_cost.begin(), route.method_cost.end());
    entry.max_cost = max_admission_cost(route);
    std::vector<std::string> plans;
    for (const limit_config& limit : route.limits) {
      entry.limits.push_back(resolve(route, limit, nullptr, on_error));
      entry.identities.push_back(
          {route.name, limit.name, signature_of(route, limit, entry.limits.back(), on_error)});
      for (const auto& [plan, values] : limit.plans) {
        if (std::find(plans.begin(), plans.end(), plan) == plans.end()) {
          plans.push_back(plan);
        }
      }
    }
    for (const std::string& plan : plans) {
      std::vector<policy> limits;
      for (const limit_config& limit : route.limits) {
        limits.push_back(resolve(route, limit, &plan, on_error));
      }
      entry.plans.emplace_back(plan, std::move(limits));
    }
  }
  bind_slots();
}

void limiter::bind_slots() {
  // Names are unique in a loaded config; a hand-built one may repeat them, and two limits must
  // never share a slot (a route's limits would then count each request twice).
  std::set<limit_identity> seen;
  for (route_entry& entry : routes_) {
    for (limit_identity& id : entry.identities) {
      const std::string name = id.limit;
      for (int n = 2; !seen.insert(id).second; ++n) {
        id.limit = name + "#" + std::to_string(n);
      }
    }
  }
  try {
    for (route_entry& entry : routes_) {
      for (std::size_t i = 0; i < entry.limits.size(); ++i) {
        const std::uint32_t slot = store_->bind_slot(entry.identities[i], entry.limits[i].algo);
        bound_.push_back(slot);
        const std::string key = entry.identities[i].key();
        entry.limits[i].slot = slot;
        entry.limits[i].key = key;
        for (auto& [plan, limits] : entry.plans) {
          limits[i].slot = slot;
          limits[i].key = key;
        }
      }
    }
  } catch (...) {
    for (std::uint32_t slot : bound_) {
      store_->unbind_slot(slot);
    }
    throw;
  }
}

limiter::~limiter() {
  for (std::uint32_t slot : bound_) {
    store_->unbind_slot(slot);
  }
}

const limit_identity& limiter::identity(std::size_t route, std::size_t limit) const {
  return routes_[route].identities[limit];
}

std::uint64_t limiter::cost(std::size_t route, std::string_view method) const {
  const route_entry& entry = routes_[route];
  const auto listed = [&](std::string_view m) -> const std::uint64_t* {
    for (const auto& [name, cost] : entry.method_cost) {
      if (name == m) {
        return &cost;
      }
    }
    return nullptr;
  };
  if (const std::uint64_t* cost = listed(method)) {
    return *cost;
  }
  // A HEAD is served as the GET it matches (the router's rule too; RFC 9110 §9.3.2): unless
  // the route names HEAD, it costs what a GET costs, never less.
  if (method == "HEAD") {
    if (const std::uint64_t* cost = listed("GET")) {
      return *cost;
    }
  }
  return entry.cost;
}

std::span<const policy> limiter::policies(std::size_t route, std::string_view plan) const {
  const route_entry& entry = routes_[route];
  for (const auto& [name, limits] : entry.plans) {
    if (name == plan) {
      return limits;
    }
  }
  return entry.limits;
}

bool limiter::cost_from_response(std::size_t route) const {
  return route < routes_.size() && routes_[route].from_response;
}

std::uint32_t limiter::factor_ppm(std::size_t route) const {
  if (route >= routes_.size() || !routes_[route].adaptive) {
    return k_factor_one;
  }
  return routes_[route].adaptive->factor_ppm();
}

std::span<const policy> limiter::effective(std::size_t route, std::string_view plan,
                                           std::vector<policy>& scaled) const {
  const std::span<const policy> configured = policies(route, plan);
  const std::uint32_t factor = factor_ppm(route);
  if (factor >= k_factor_one) {
    return configured;
  }
  // Copies only while the upstream struggles; the factor is read once, so every limit of the
  // request is scaled alike.
  scaled.clear();
  scaled.reserve(configured.size());
  for (const policy& p : configured) {
    scaled.push_back(scale_policy(p, factor, k_factor_one, routes_[route].max_cost));
  }
  return scaled;
}

check_request limiter::make_request(const limit_request& req, std::vector<policy>& scaled) const {
  check_request out;
  out.subject = req.subject;
  out.route = static_cast<std::uint32_t>(req.route);
  out.limits = effective(req.route, req.plan, scaled);
  out.cost = cost(req.route, req.method);
  out.max_cost = routes_[req.route].max_cost;
  if (routes_[req.route].from_response) {
    // Admission asks only for room left; the response's cost is charged when it ends.
    out.mode = charge_mode::peek;
    out.cost = 1;
  }
  out.now = clock_.now();
  return out;
}

std::optional<route_decision> limiter::try_charge(const limit_request& req, std::uint64_t cost) {
  if (req.route >= routes_.size() || routes_[req.route].limits.empty()) {
    return route_decision{};
  }
  std::vector<policy> scaled;
  check_request request = make_request(req, scaled);
  request.mode = charge_mode::force;
  request.cost = cost;
  return store_->try_check(request);
}

boost::asio::awaitable<route_decision> limiter::charge(const limit_request& req,
                                                       std::uint64_t cost) {
  if (req.route >= routes_.size() || routes_[req.route].limits.empty()) {
    co_return route_decision{};
  }
  std::vector<policy> scaled;
  check_request request = make_request(req, scaled);
  request.mode = charge_mode::force;
  request.cost = cost;
  co_return co_await store_->check(request);
}

std::optional<route_decision> limiter::try_check(const limit_request& req) {
  if (req.route >= routes_.size() || routes_[req.route].limits.empty()) {
    return route_decision{};
  }
  std::vector<policy> scaled;
  return store_->try_check(make_request(req, scaled));
}

boost::asio::awaitable<route_decision> limiter::check(const limit_request& req) {
  if (req.route >= routes_.size() || routes_[req.route].limits.empty()) {
    co_return route_decision{};
  }
  std::vector<policy> scaled;
  const check_request request = make_request(req, scaled);
  co_return co_await store_->check(request);
}

boost::asio::awaitable<std::vector<decision>> limiter::status(std::string_view subject,
                                                              std::size_t route,
                                                              std::string_view plan) {
  if (route >= routes_.size()) {
    co_return std::vector<decision>{};
  }
  std::vector<policy> scaled;
  const std::span<const policy> limits = effective(route, plan, scaled);
  co_return co_await store_->status(subject, static_cast<std::uint32_t>(route), limits,
                                    clock_.now());
}

boost::asio::awaitable<std::size_t> limiter::reset(std::string_view subject,
                                                   std::optional<std::size_t> route) {
  std::size_t touched = 0;
  for (std::size_t r = 0; r < routes_.size(); ++r) {
    if ((route && *route != r) || routes_[r].limits.empty()) {
      continue;
    }
    // The store is shared across configurations: name the route by its limits, not its index.
    const std::size_t rows =
        co_await store_->reset_limits(subject, static_cast<std::uint32_t>(r), routes_[r].limits);
    touched += rows > 0 ? 1 : 0;
  }
  co_return touched;
}

boost::asio::awaitable<std::size_t> limiter::reset_all() {
  co_return co_await store_->reset_all();
}

boost::asio::awaitable<std::vector<denied_subject>> limiter::top_denied(std::size_t n) {
  co_return co_await store_->top_denied(n, clock_.now());
}

std::size_t limiter::sweep() {
  return store_->sweep(clock_.now());
}

}  // namespace ratewall
