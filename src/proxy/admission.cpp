#include "ratewall/proxy/admission.hpp"

#include <chrono>
#include <utility>

#include "ratewall/proxy/gateway.hpp"

namespace ratewall {

namespace {

/// An answer of the gateway's own, with the problem body.
// identity.reject_limit as the identity resolver asks it about bearer tokens.
class reject_budget final : public token_check_budget {
 public:
  explicit reject_budget(const gateway& gw) : gw_(gw) {}
  bool available(std::string_view ip_subject) const override {
    return !gw_.reject_limit().spent(ip_subject, gw_.time().now());
  }
  void charge(std::string_view ip_subject) const override {
    gw_.reject_limit().take(ip_subject, gw_.time().now());
  }

 private:
  const gateway& gw_;
};

admission local(admission a, unsigned status, std::string_view detail) {
  a.forward = false;
  a.status = status;
  a.body = problem_json(status, denial_reason(status), detail);
  a.content_type = k_problem_content_type;
  return a;
}

limit_request limit_request_of(const admission& a) {
  return limit_request{*a.route, a.who.subject, a.who.plan, a.method};
}

/// The limits' verdict made into the answer: quota headers (into `fields`), and the denial if it
/// is one.
void apply_verdict(const gateway& gw, admission& a, route_decision verdict, header_list& fields) {
  const route_config& route = gw.cfg().routes[*a.route];
  a.verdict = std::move(verdict);
  const route_decision& v = a.verdict;

  if (v.store_full) {
    // No room to track the client (store.on_full: deny): the gateway's capacity, not the
    // client's limit, so a 503 without quota headers rather than a 429.
    a.decision = request_decision::error;
    fields.emplace_back("Retry-After", std::to_string(retry_after_seconds(v.headline)));
    a = local(std::move(a), 503, "the rate limiter is at capacity and cannot track this client");
    return;
  }
  if (v.has_limits) {
    // The window of the plan's own values where it overrides them, as the quota already is.
    const limit_config& limit = route.limits[v.limit_index];
    const auto plan = limit.plans.find(a.who.plan);
    const limit_override* override = plan == limit.plans.end() ? nullptr : &plan->second;
    render_rate_limit_headers(v.headline, limit.name, policy_window_seconds(limit, override),
                              route.headers, gw.time().wall_now(), fields);
  }
  if (v.shadow_denied) {
    // Shadow mode: what would have been denied is counted and logged, and nothing else.
    a.decision = request_decision::shadow_denied;
    a.limit = route.limits[v.shadow_limit_index].name;
  }
  if (!v.allowed) {
    const limit_config& limit = route.limits[v.limit_index];
    a.decision = request_decision::denied;
    a.limit = limit.name;
    denial answer = render_denial(route.deny, route.name, limit.name, v.headline);
    a.status = answer.status;
    a.body = std::move(answer.body);
    a.content_type = answer.content_type;
    return;
  }
  a.forward = true;
}

}  // namespace

std::string problem_json(unsigned status, std::string_view title, std::string_view detail) {
  std::string body = "{\"type\":\"about:blank\",\"title\":\"";
  body += title;
  body += "\",\"status\":";
  body += std::to_string(status);
  body += ",\"detail\":\"";
  body += detail;  // only fixed text of ours, never request data
  body += "\"}\n";
  return body;
}

admission try_admit(const gateway& gw, const admission_request& req, header_list& fields) {
  admission a;
  a.route = gw.routes().match(req.method, req.host, req.path);
  if (!a.route) {
    a.decision = request_decision::no_route;
    return local(std::move(a), 404, "no route matches this request");
  }
  const route_config& route = gw.cfg().routes[*a.route];

  // A client's failed tokens spend its reject_limit, and once it is spent its new tokens are
  // not checked at all: signatures cannot be made to be checked at line rate.
  const reject_budget budget(gw);
  identity_input input = req.identity;
  input.token_budget = &budget;
  a.who = gw.identity().resolve(route, input);
  if (!a.who.refused.empty()) {
    a.decision = request_decision::error;
    const std::string detail = a.who.refused;  // names a field of the config, never its value
    return local(std::move(a), 400, detail);
  }
  if (a.who.rejected) {
    a.decision = request_decision::rejected;
    const bool token = a.who.source == identity_source::jwt;
    // Wrong keys and tokens cost a client its reject_limit: keys cannot be guessed at line
    // rate, and made-up tokens cannot keep the gateway busy checking signatures.
    const decision d = gw.reject_limit().take(a.who.subject, gw.time().now());
    // A token refused unchecked (the budget was spent) is answered 429 even if the budget
    // refilled since: a 401 would tell the client to drop a token that may be good.
    const bool unchecked = a.who.rejected_for == to_string(jwt_error::unchecked);
    if (!d.allowed || unchecked) {
      fields.emplace_back("Retry-After", std::to_string(d.allowed ? 1 : retry_after_seconds(d)));
      return local(std::move(a), 429,
                   token ? "too many requests with invalid bearer tokens"
                         : "too many requests with unknown API keys");
    }
    if (token) {
      // RFC 6750 §3.1: the client should get a new token rather than retry this one.
      fields.emplace_back("WWW-Authenticate", "Bearer error=\"invalid_token\"");
    }
    const std::string_view detail = a.who.rejected_for;  // fixed text of ours, static
    return local(std::move(a), 401, detail);
  }

  a.method = req.method;
  const auto decide_start = std::chrono::steady_clock::now();
  std::optional<route_decision> verdict = gw.limits().try_check(limit_request_of(a));
  if (!verdict) {
    a.pending = true;  // the store is remote: admit() asks it
    return a;
  }
  process_metrics().observe_decision(std::chrono::steady_clock::now() - decide_start);
  apply_verdict(gw, a, std::move(*verdict), fields);
  return a;
}

boost::asio::awaitable<admission> admit(std::shared_ptr<const gateway> gw, admission a,
                                        header_list& fields) {
  if (a.pending) {
    const auto decide_start = std::chrono::steady_clock::now();
    route_decision verdict = co_await gw->limits().check(limit_request_of(a));
    process_metrics().observe_decision(std::chrono::steady_clock::now() - decide_start);
    a.pending = false;
    apply_verdict(*gw, a, std::move(verdict), fields);
  }
  co_return a;
}

}  // namespace ratewall
