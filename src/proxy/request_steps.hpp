#pragma once

// The steps of serving one request that do not depend on how it arrived: its id, its admission
// and what the trace records of it, the head the upstream gets, and the charge of a cost the
// response reports. The HTTP/1.1 session (session.cpp) calls them per request; an HTTP/2 stream
// is served by the same steps. Internal to the proxy module.

#include <boost/asio/awaitable.hpp>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "connection.hpp"
#include "ratewall/http/identity.hpp"
#include "ratewall/proxy/admission.hpp"
#include "ratewall/proxy/gateway.hpp"

namespace ratewall {

/// The request's id: the client's X-Request-Id when it is short and plain, else a new one.
std::string request_id_of(worker& w, const request_head& req);

/// All the X-Forwarded-For values of a request, joined by ",".
std::string forwarded_for_of(const request_head& req);

/// try_admit for the request whose head is `req`, checked into `canon`, from `peer_ip` (parsed
/// once for its connection into `peer_address`; a plain function: what it builds for admission
/// does not outlive the call, and stays out of the coroutine frame). The response's fields go
/// into `response_fields`.
admission try_admit_head(const gateway& gw, std::string_view peer_ip,
                         const std::optional<ip_address>& peer_address,
                         const canonical_request& canon, const request_head& req,
                         std::string_view forwarded_for, header_list& response_fields);

/// Records in `trace` what admission `a` decided: the decision, the limit, the route and the
/// counters the request counts in when it ends, and for the access log the subject it was
/// identified as.
void note_admission(request_trace& trace, const gateway& gw, const admission& a, bool logged);

/// What the head written upstream says of a request and of where it came from.
struct forward_head_input {
  const request_head& head;
  const canonical_request& canon;
  const identity_result& who;
  std::string_view peer_ip;
  bool secure = false;  // the client's connection is TLS: X-Forwarded-Proto https
  std::string_view forwarded_for;
  std::string_view request_id;
  body_framing framing = body_framing::none;
  std::uint64_t length = 0;
  std::string_view upgrade;
  bool identity_encoding = false;
  std::string_view default_host;  // sent when the request named no host (upstream_config)
  // identity.user_header: a claim about who the client is, passed on from a trusted proxy only
  std::string_view user_header{};
};

/// Writes into `out` the head the upstream gets, then `body_start` (as much of the body as was
/// read first); `target` keeps the forwarded target the head refers to.
/// X-Forwarded-For: a trusted proxy's chain is extended; anyone else's is replaced, so an
/// upstream that reads it is never handed a client's own claim. The same for -Proto/-Host, and
/// anyone else's user header (identity.user_header) is left out.
void write_forward_head(const forward_head_input& in, std::string_view body_start,
                        std::string& target, std::string& out);

/// The charge of a cost_from_response route: what the response reported (or the route's
/// default, or max), charged once (settle(), connection.hpp). The relay settles it as soon as
/// the upstream's answer has been read whole, before the last of it goes to the client; the
/// session settles it after an exchange that ended otherwise, however it ended: the upstream did
/// the work even when the client left. Every limit of the route is charged, past its limit if it
/// must (charge_mode::force).
struct response_charge {
  response_charge(const cost_from_response_config& cfg, const gateway& gw, const admission& a,
                  request_trace& trace)
      : meter(cfg), gw(gw), a(a), trace(trace) {}
  response_charge(const response_charge&) = delete;
  response_charge& operator=(const response_charge&) = delete;

  response_cost meter;  // what the response reports, told by the exchange
  const gateway& gw;
  const admission& a;
  request_trace& trace;
  bool charged = false;
};

/// What a request keeps while it is served, held by its connection's session rather than by
/// the coroutine frame that serves it: Asio reuses a frame's memory only up to 1020 bytes, and
/// these two made that frame 2.4 KiB, a malloc and a free on every request. Made when the
/// request's head is read; destroying it ends the request (request_trace's destructor counts
/// and logs it). The configuration the request is served on goes last: the admission and the
/// trace hold views into it (route, limit and upstream names) that they read as they end.
struct request_scope {
  request_scope(worker& w, std::string_view method, std::string_view target,
                std::shared_ptr<const gateway> gateway)
      : gw(std::move(gateway)), trace(w, method, target) {}
  std::shared_ptr<const gateway> gw;
  request_trace trace;
  admission a;
};

/// Asks a remote store (Redis) what try_admit could not, in a frame of its own: the admission
/// it returns would otherwise take a second admission's room in the caller's frame.
asio::awaitable<void> finish_admission(std::shared_ptr<const gateway> gw, admission& a,
                                       header_list& fields);

}  // namespace ratewall
