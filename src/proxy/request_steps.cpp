#include "request_steps.hpp"

#include <algorithm>
#include <optional>
#include <span>

#include "ratewall/core/parse.hpp"
#include "ratewall/proxy/http_head.hpp"

namespace ratewall {

namespace {

/// A request id from the client is kept when it is short and plain; anything else is replaced.
bool acceptable_request_id(std::string_view id) {
  if (id.empty() || id.size() > 128) {
    return false;
  }
  for (char c : id) {
    bool ok = (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
              c == '-' || c == '_' || c == '.';
    if (!ok) {
      return false;
    }
  }
  return true;
}

/// A request's fields as identity's header: and cookie: descriptors read them.
class head_fields final : public request_fields {
 public:
  explicit head_fields(const request_head& head) : head_(head) {}
  std::optional<std::string_view> value(std::string_view name, std::size_t index) const override {
    auto [it, end] = head_.equal_range(name);
    for (; it != end; ++it, --index) {
      if (index == 0) {
        return it->value();
      }
    }
    return std::nullopt;
  }
  std::size_t count_like(std::string_view name, std::string_view& first) const override {
    std::size_t count = 0;
    for (const auto& f : head_) {
      if (cgi_same(f.name_string(), name) && count++ == 0) {
        first = f.value();
      }
    }
    return count;
  }

 private:
  const request_head& head_;
};

/// The fields identity_input names, each the first of its name, found in one pass over the
/// head: three lookups in Beast's field set (each a tree walk comparing names a character at a
/// time, case folded) cost about 400 instructions a request; most heads have a dozen fields.
struct named_fields {
  std::string_view api_key;
  std::string_view authorization;
  std::string_view user;
};

named_fields find_named_fields(const request_head& req, const identity_config& identity) {
  named_fields found;
  bool key = false, authorization = false, user = false;
  for (const auto& f : req) {
    const std::string_view name = f.name_string();
    if (!key && beast::iequals(name, identity.api_key_header)) {
      found.api_key = f.value();
      key = true;
    }
    if (!authorization && f.name() == http::field::authorization) {
      found.authorization = f.value();
      authorization = true;
    }
    if (!user && beast::iequals(name, identity.user_header)) {
      found.user = f.value();
      user = true;
    }
  }
  return found;
}

/// The counters the admitted request counts in when it is over (ratewall_requests_total): its
/// route's for the client's plan, and those of the limit that denied it or would have (shadow),
/// which count it if it ends as that decision. Pointers resolved at load: no label is built.
void pick_decision_counters(request_trace& trace, const gateway& gw, const admission& a) {
  const std::span<decision_counters* const> row = gw.decisions(*a.route, a.who.plan);
  trace.decisions = row[0];
  if (a.decision == request_decision::denied) {
    trace.limit_decisions = row[1 + a.verdict.limit_index];
  } else if (a.decision == request_decision::shadow_denied) {
    trace.limit_decisions = row[1 + a.verdict.shadow_limit_index];
  }
}

}  // namespace

std::string request_id_of(worker& w, const request_head& req) {
  if (auto it = req.find("X-Request-Id"); it != req.end() && acceptable_request_id(it->value())) {
    return std::string(it->value());
  }
  return w.next_request_id();
}

std::string forwarded_for_of(const request_head& req) {
  std::string joined;
  for (auto it = req.find("X-Forwarded-For");
       it != req.end() && beast::iequals(it->name_string(), "X-Forwarded-For"); ++it) {
    if (!joined.empty()) {
      joined += ',';
    }
    joined += it->value();
  }
  return joined;
}

admission try_admit_head(const gateway& gw, std::string_view peer_ip,
                         const std::optional<ip_address>& peer_address,
                         const canonical_request& canon, const request_head& req,
                         std::string_view forwarded_for, header_list& response_fields) {
  const identity_config& identity = gw.cfg().identity;
  const head_fields fields(req);
  std::string_view query = canon.target.query;
  if (!query.empty()) {
    query.remove_prefix(1);  // "?"
  }
  const named_fields named = find_named_fields(req, identity);
  const identity_input who{.peer_ip = peer_ip,
                           .api_key = named.api_key,
                           .authorization = named.authorization,
                           .user = named.user,
                           .forwarded_for = forwarded_for,
                           .fields = &fields,
                           .path = canon.target.path,
                           .query = query,
                           .peer_address = peer_address};
  return try_admit(gw, admission_request{req.method_string(), canon.host, canon.target.path, who},
                   response_fields);
}

void note_admission(request_trace& trace, const gateway& gw, const admission& a, bool logged) {
  trace.rec.decision = a.decision;
  trace.rec.limit = a.limit;
  if (a.route) {
    trace.route = &gw.metrics(*a.route);
    trace.rec.route = gw.cfg().routes[*a.route].name;
    pick_decision_counters(trace, gw, a);
  }
  if (logged) {
    trace.subject = a.who.subject;
    trace.plan = a.who.plan;
    trace.key_name = a.who.key_name;
    if (!a.who.client_ip.empty()) {
      trace.client = a.who.client_ip;  // behind a trusted proxy, the client it names
    }
  }
}

void write_forward_head(const forward_head_input& in, std::string_view body_start,
                        std::string& target, std::string& out) {
  std::string chain;
  if (in.who.peer_trusted && !in.forwarded_for.empty()) {
    chain = in.forwarded_for;
    chain += ", ";
  }
  chain += in.peer_ip;
  std::string_view proto = in.secure ? "https" : "http";
  std::string_view host = in.canon.host;
  if (in.who.peer_trusted) {
    if (auto it = in.head.find("X-Forwarded-Proto"); it != in.head.end()) {
      proto = it->value();
    }
    if (auto it = in.head.find("X-Forwarded-Host"); it != in.head.end()) {
      host = it->value();
    }
  }
  out.clear();
  target = in.canon.target.path;
  target += in.canon.target.query;
  write_upstream_request_head(
      in.head, in.framing, in.length,
      forwarding_headers{target, in.canon.host.empty() ? in.default_host : in.canon.host, chain,
                         proto, host, in.request_id, in.upgrade, in.identity_encoding,
                         in.who.peer_trusted, in.user_header},
      out);
  if (body_start.empty()) {
    return;
  }
  if (in.framing == body_framing::chunked) {
    char size_line[18];
    out.append(size_line, chunk_size_line(body_start.size(), size_line));
    out.append(body_start);
    out.append("\r\n");
  } else {
    out.append(body_start);
  }
}

asio::awaitable<void> settle(response_charge& charge) {
  if (charge.charged) {
    co_return;
  }
  charge.charged = true;
  const std::uint64_t cost = charge.meter.cost();
  const admission& a = charge.a;
  const limit_request req{*a.route, a.who.subject, a.who.plan, a.method};
  if (!charge.gw.limits().try_charge(req, cost)) {
    co_await charge.gw.limits().charge(req, cost);
  }
  charge.trace.rec.cost = cost;
  charge.trace.route->response_cost(cost, charge.meter.reported());
}

asio::awaitable<void> finish_admission(std::shared_ptr<const gateway> gw, admission& a,
                                       header_list& fields) {
  a = co_await admit(std::move(gw), std::move(a), fields);
}

}  // namespace ratewall
