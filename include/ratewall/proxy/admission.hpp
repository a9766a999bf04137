#pragma once

// Admission (DESIGN §1): whether a request goes upstream, decided from its head alone, without a
// socket. Route (404), identity (401, and 429 past identity.reject_limit), then every limit of
// the route (429 or the route's deny status; 503 when the store cannot track the client). The
// session reads and checks the head before, and forwards or answers after.

#include <boost/asio/awaitable.hpp>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "ratewall/admin/metrics.hpp"
#include "ratewall/http/identity.hpp"
#include "ratewall/http/rate_limit_headers.hpp"
#include "ratewall/limit/store.hpp"

namespace ratewall {

class gateway;

/// What admission reads of a request: its canonical target and host (request_hygiene), its
/// method, and the fields that name a client. Views into the caller's request, which outlives
/// the admission.
struct admission_request {
  std::string_view method;
  std::string_view host;  // lower case, without port
  std::string_view path;  // canonical
  identity_input identity;
};

/// The answer admission gives. When `forward` is false the gateway answers itself with
/// `status`, `body` and `content_type`. The fields it puts on the response either way
/// (X-RateLimit-*, Retry-After) go straight into the response's list, which the caller gives.
struct admission {
  bool forward = false;
  request_decision decision = request_decision::allowed;  // for metrics and the access log
  std::optional<std::size_t> route;                       // unset: no route matched
  std::string_view limit;  // the limit that denied, or the shadow limit that would have
  identity_result who;
  route_decision verdict;  // when forwarded: holds concurrency units, carries any delay

  unsigned status = 0;
  std::string body;
  std::string_view content_type;

  bool pending = false;     // the limits are still to be asked of a remote store: admit() does
  std::string_view method;  // for the limits (route_config::method_cost)
};

/// Admits `req` on the configuration `gw` as far as it can without suspending: with the memory
/// store that is the whole answer; with a remote one (Redis) the answer comes back `pending`,
/// route and identity done, for `admit` to finish. A coroutine frame costs more than the rest
/// of a 429, so the common case does without one:
///   admission a = try_admit(*gw, req, response_fields);
///   if (a.pending) a = co_await admit(gw, std::move(a), response_fields);
/// The fields the response carries are appended to `fields`: a connection's list, reused from
/// request to request, where a list of the admission's own would cost an allocation each.
/// Every view in the result points into `req` or into `gw`'s configuration.
admission try_admit(const gateway& gw, const admission_request& req, header_list& fields);

/// Finishes a pending admission (asks the store); any other is returned as it is. `fields`
/// must outlive the coroutine.
boost::asio::awaitable<admission> admit(std::shared_ptr<const gateway> gw, admission a,
                                        header_list& fields);

/// {"type":"about:blank","title":<title>,"status":<status>,"detail":<detail>}: the body of the
/// gateway's own answers. `detail` is fixed text of ours, never request data.
std::string problem_json(unsigned status, std::string_view title, std::string_view detail);

}  // namespace ratewall
