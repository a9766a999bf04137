#include "ratewall/admin/admin_server.hpp"

#include <algorithm>
#include <array>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/thread_pool.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <charconv>
#include <cstdlib>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <stdexcept>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include "ratewall/admin/dashboard_page.hpp"
#include "ratewall/admin/rate_history.hpp"
#include "ratewall/core/hash.hpp"
#include "ratewall/core/log.hpp"
#include "ratewall/core/parse.hpp"
#include "ratewall/core/use_tuple.hpp"
#include "ratewall/http/identity.hpp"
#include "ratewall/http/keep_alive.hpp"
#include "ratewall/proxy/gateway.hpp"
#include "ratewall/proxy/upstream_budget.hpp"

namespace ratewall {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using json = nlohmann::ordered_json;

namespace {

// The admin API serves a few operators and a scraper; these bound what a misbehaving client
// on the admin network can hold (admin.header_timeout and admin.max_connections the rest).
constexpr std::uint32_t k_max_header_bytes = 16 * 1024;
constexpr std::uint64_t k_max_body_bytes = 64 * 1024;
// Reading a request body, and writing a response.
constexpr auto k_io_timeout = std::chrono::seconds(30);
constexpr std::size_t k_first_read_bytes = 4096;
// What linger() reads and drops at most, and for how long.
constexpr auto k_linger_time = std::chrono::seconds(1);
constexpr std::size_t k_linger_bytes = 1024 * 1024;
constexpr std::size_t k_max_top = 1000;
// The dashboard's history: 60 buckets of 5 s, the last five minutes.
constexpr nanos k_dashboard_bucket = std::chrono::seconds(5);
constexpr std::size_t k_dashboard_buckets = 60;
// How long after a bucket starts the sampler takes its edge (a timer fires a little late,
// never early).
constexpr nanos k_edge_delay = std::chrono::milliseconds(1);
// Upstream health on the dashboard is judged on the last minute of responses and failures.
constexpr std::size_t k_health_buckets = 12;
constexpr std::size_t k_dashboard_top = 10;

using request = http::request<http::string_body>;
using response = http::response<http::string_body>;

response json_response(http::status status, const json& body) {
  response res{status, 11};
  res.set(http::field::content_type, "application/json");
  res.body() = body.dump(-1, ' ', false, json::error_handler_t::replace) + "\n";
  return res;
}

response error_response(http::status status, std::string message) {
  return json_response(status, json{{"error", std::move(message)}});
}

response method_not_allowed(std::string_view allow) {
  response res = error_response(http::status::method_not_allowed, "method not allowed");
  res.set(http::field::allow, allow);
  return res;
}

// application/x-www-form-urlencoded decoding of one query component; nullopt on a bad escape.
std::optional<std::string> url_decode(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '+') {
      out += ' ';
    } else if (s[i] == '%') {
      if (i + 2 >= s.size() || hex_value(s[i + 1]) < 0 || hex_value(s[i + 2]) < 0) {
        return std::nullopt;
      }
      out += static_cast<char>(hex_value(s[i + 1]) * 16 + hex_value(s[i + 2]));
      i += 2;
    } else {
      out += s[i];
    }
  }
  return out;
}

struct query_params {
  std::vector<std::pair<std::string, std::string>> items;
  bool valid = true;

  // The first value of `name`.
  std::optional<std::string> get(std::string_view name) const {
    for (const auto& [k, v] : items) {
      if (k == name) {
        return v;
      }
    }
    return std::nullopt;
  }
};

query_params parse_query(std::string_view query) {
  query_params q;
  while (!query.empty()) {
    auto amp = query.find('&');
    std::string_view part = query.substr(0, amp);
    query = amp == std::string_view::npos ? std::string_view() : query.substr(amp + 1);
    if (part.empty()) {
      continue;
    }
    auto eq = part.find('=');
    auto key = url_decode(part.substr(0, eq));
    auto value =
        url_decode(eq == std::string_view::npos ? std::string_view() : part.substr(eq + 1));
    if (!key || !value) {
      q.valid = false;
      return q;
    }
    q.items.emplace_back(std::move(*key), std::move(*value));
  }
  return q;
}

// Milliseconds, rounded up so that "retry after" is never early.
std::uint64_t ceil_ms(nanos d) {
  if (d.count() <= 0) {
    return 0;
  }
  auto ns = static_cast<std::uint64_t>(d.count());
  return ns / 1'000'000 + (ns % 1'000'000 != 0 ? 1 : 0);
}

// Comparing digests of equal length in full, whatever differs first, so the time taken says
// nothing about how much of a guess was right (nor about the token's length).
bool constant_time_equal(const sha256_digest& a, const sha256_digest& b) {
  unsigned char diff = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  }
  return diff == 0;
}

// The credentials of an Authorization value of `scheme` ("bearer " or "basic ", lower case
// with its space; the scheme is case-insensitive), trimmed; nullopt for another scheme.
std::optional<std::string_view> credentials(std::string_view authorization,
                                            std::string_view scheme) {
  if (authorization.size() <= scheme.size()) {
    return std::nullopt;
  }
  for (std::size_t i = 0; i < scheme.size(); ++i) {
    char c = authorization[i];
    c = c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c;
    if (c != scheme[i]) {
      return std::nullopt;
    }
  }
  std::string_view token = authorization.substr(scheme.size());
  while (!token.empty() && token.front() == ' ') {
    token.remove_prefix(1);
  }
  while (!token.empty() && token.back() == ' ') {
    token.remove_suffix(1);
  }
  return token;
}

// Standard base64 with padding (RFC 4648 §4), as browsers send Basic credentials; nullopt
// when it is not.
std::optional<std::string> base64_decode(std::string_view in) {
  if (in.size() % 4 != 0) {
    return std::nullopt;
  }
  std::string out;
  std::uint32_t bits = 0;
  int pending = 0;  // bits read and not yet written out
  for (std::size_t i = 0; i < in.size(); ++i) {
    const char c = in[i];
    if (c == '=') {
      if (i + 2 < in.size() || (i + 1 < in.size() && in[i + 1] != '=')) {
        return std::nullopt;  // padding ends the text, at most two of it
      }
      break;
    }
    int value = -1;
    if (c >= 'A' && c <= 'Z') {
      value = c - 'A';
    } else if (c >= 'a' && c <= 'z') {
      value = c - 'a' + 26;
    } else if (c >= '0' && c <= '9') {
      value = c - '0' + 52;
    } else if (c == '+') {
      value = 62;
    } else if (c == '/') {
      value = 63;
    } else {
      return std::nullopt;
    }
    bits = (bits << 6) | static_cast<std::uint32_t>(value);
    pending += 6;
    if (pending >= 8) {
      pending -= 8;
      out += static_cast<char>((bits >> pending) & 0xff);
    }
  }
  return out;
}

// The host of a Host field value `host[:port]` or `[ipv6]:port`: lower case, without port,
// brackets or a final dot; nullopt when the value is not one.
std::optional<std::string> host_of(std::string_view value) {
  value = trim(value);
  std::string_view host;
  std::string_view rest;
  if (!value.empty() && value.front() == '[') {
    auto close = value.find(']');
    if (close == std::string_view::npos) {
      return std::nullopt;
    }
    host = value.substr(1, close - 1);
    rest = value.substr(close + 1);
    if (host.find(':') == std::string_view::npos || !parse_ip(host)) {
      return std::nullopt;  // brackets hold an IPv6 address and nothing else
    }
  } else {
    auto colon = value.find(':');
    host = value.substr(0, colon);
    rest = colon == std::string_view::npos ? std::string_view() : value.substr(colon);
    const bool name_chars = std::all_of(host.begin(), host.end(), [](char c) {
      return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
             c == '-' || c == '.' || c == '_' || c == '~';
    });
    if (host.empty() || !name_chars) {
      return std::nullopt;
    }
  }
  if (!rest.empty()) {
    std::string_view port = rest.substr(1);
    std::uint32_t number = 0;
    auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), number);
    if (rest.front() != ':' ||
        (!port.empty() && (ec != std::errc() || end != port.data() + port.size() ||
                           port.size() > 5 || number > 65535))) {
      return std::nullopt;
    }
  }
  std::string out(host);
  std::transform(out.begin(), out.end(), out.begin(), [](char c) {
    return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c;
  });
  if (out.size() > 1 && out.back() == '.') {
    out.pop_back();  // "localhost." is the same name as "localhost"
  }
  return out;
}

// Whether a request that names `host` (as host_of returns it) may be answered: a browser
// sends the name it was pointed at, and only a name the attacker cannot make resolve to this
// machine is safe (DNS rebinding).
bool host_allowed(const std::string& host, const std::vector<std::string>& allowed_hosts) {
  if (is_loopback_host(host)) {
    return true;
  }
  const auto address = parse_ip(host);
  for (std::string_view entry : allowed_hosts) {
    if (entry.size() > 2 && entry.front() == '[' && entry.back() == ']') {
      entry = entry.substr(1, entry.size() - 2);
    }
    if (entry.size() > 1 && entry.back() == '.') {
      entry.remove_suffix(1);
    }
    if (entry == host) {
      return true;
    }
    // Addresses compare as addresses: "fd00:0::1" is "fd00::1".
    if (address && parse_ip(entry) == address) {
      return true;
    }
  }
  return false;
}

tcp::endpoint resolve_listen(const endpoint& e) {
  boost::system::error_code ec;
  auto address = asio::ip::make_address(e.host, ec);  // the loader took localhost as 127.0.0.1
  if (ec) {
    throw std::runtime_error("admin.listen: \"" + e.host +
                             "\" is not an IP address (use 127.0.0.1, ::1 or an interface "
                             "address)");
  }
  return {address, e.port};
}

}  // namespace

admin_options admin_options::from_config(const admin_config& cfg, std::string hash_key) {
  admin_options o;
  o.listen = cfg.listen;
  o.token_env = cfg.token_env;
  if (const char* token = std::getenv(cfg.token_env.c_str()); token != nullptr) {
    o.token = token;
  }
  o.hash_key = std::move(hash_key);
  if (cfg.listen_without_token && !is_loopback_host(cfg.listen.host)) {
    const auto& where = o.token.empty() ? *cfg.listen_without_token : cfg.listen;
    o.why =
        "admin API on " + where.host + ":" + std::to_string(where.port) +
        (o.token.empty() ? " only (loopback): " + cfg.token_env +
                               " is not set; set it to reach the admin API on " + cfg.listen.host +
                               ":" + std::to_string(cfg.listen.port)
                         : ": " + cfg.token_env + " is set, so it is reachable from other hosts");
    o.listen = where;
  }
  return o;
}

std::string admin_options::refusal() const {
  if (!token.empty() || is_loopback_host(listen.host)) {
    return {};
  }
  return "admin.listen " + listen.host + ":" + std::to_string(listen.port) +
         " is not a loopback address and no admin token is set: export " + token_env +
         "=<secret> or listen on 127.0.0.1 (the admin API can reset limits and reload the "
         "configuration)";
}

namespace {

// One admin connection, owned by the coroutine that serves it. It is listed in the server's
// registry from its creation to its destruction, so that the accept loop can close one that
// waits for a request to make room and stop() can close them all.
struct admin_connection {
  admin_connection(tcp::socket socket, std::set<admin_connection*>& registry)
      : stream(std::move(socket)), registry(registry) {
    registry.insert(this);
  }
  ~admin_connection() { registry.erase(this); }
  admin_connection(const admin_connection&) = delete;
  admin_connection& operator=(const admin_connection&) = delete;

  beast::tcp_stream stream;
  beast::flat_buffer buffer;
  std::set<admin_connection*>& registry;
  // Waiting for a request with no byte of it received (idle), in the middle of its head, or
  // serving a request from the moment its head is whole.
  enum class phase { idle, head, busy };
  phase at = phase::idle;
  std::uint64_t waiting_since = 0;  // when it began to wait for its head: lower is older
};

}  // namespace

struct admin_server::impl {
  impl(admin_options o, admin_backend& b, metrics_registry& m)
      : options(std::move(o)), backend(b), metrics(m), ioc(1), acceptor(ioc) {}

  asio::awaitable<void> accept_loop();
  bool make_room(std::size_t max_connections);
  asio::awaitable<void> serve(std::unique_ptr<admin_connection> connection);
  asio::awaitable<boost::system::error_code> read_head(
      admin_connection& c, http::request_parser<http::string_body>& parser);
  asio::awaitable<boost::system::error_code> read_body(
      admin_connection& c, http::request_parser<http::string_body>& parser);
  asio::awaitable<void> linger(admin_connection& c);
  asio::awaitable<response> respond(const request& req, std::optional<response> refused);
  std::optional<response> refuse(const request& req) const;
  std::optional<response> screen(const request& req) const;
  asio::awaitable<response> handle(const request& req);
  bool bearer_matches(const request& req) const;
  bool basic_matches(const request& req) const;

  asio::awaitable<response> get_limits(const query_params& q);
  asio::awaitable<response> delete_limits(const query_params& q);
  asio::awaitable<response> top(const query_params& q);
  asio::awaitable<json> top_json(std::shared_ptr<const gateway> gw, std::size_t n) const;
  asio::awaitable<void> sample_loop();
  void sample();
  response dashboard_page_response() const;
  asio::awaitable<response> dashboard_data();
  asio::awaitable<response> keys(const request& req, std::string_view path, const query_params& q);
  asio::awaitable<response> list_keys(const query_params& q);
  asio::awaitable<response> put_key(const request& req, const sha256_digest& sha256);
  asio::awaitable<response> delete_key(const sha256_digest& sha256);

  // The subject named by ?subject=, or the error response.
  struct named_subject {
    std::optional<identity_result> who;
    std::optional<response> error;
  };
  named_subject subject_of(const gateway& gw, const query_params& q) const;

  admin_options options;
  admin_backend& backend;
  metrics_registry& metrics;
  sha256_digest token_digest{};
  // Open connections. Declared before the io_context: coroutines still suspended when it is
  // destroyed unregister their connections as their frames go.
  std::set<admin_connection*> connections;
  std::uint64_t wait_order = 0;
  // Per-route counts for the dashboard, sampled every bucket and before each read.
  rate_history history{k_dashboard_bucket, k_dashboard_buckets};
  steady_clock clock;
  asio::io_context ioc;
  tcp::acceptor acceptor;
  std::thread thread;
  // POST /admin/reload's reloads. A request joins the next reload to start, so it sees the
  // file as it is once it arrived: at most one reload runs and one waits, whatever the number
  // of requests (a queue of one reload per request kept SIGTERM waiting for all of them).
  // Both pointers are kept on the admin thread.
  struct reload_round {
    explicit reload_round(asio::io_context& ioc)
        : done(ioc, asio::steady_timer::time_point::max()) {}
    std::optional<reload_result> result;
    asio::steady_timer done;  // cancelled when `result` is set
  };
  std::shared_ptr<reload_round> join_reload();
  void run_reload(std::shared_ptr<reload_round> round);
  std::shared_ptr<reload_round> running_reload;
  std::shared_ptr<reload_round> next_reload;
  bool closing = false;  // stop() has begun: no reload starts
  // Runs the reloads (the thread is made up front, as Asio's pool makes it). Declared after
  // `ioc` and `backend`, which its reload and answer use, so that it goes first.
  asio::thread_pool reloader{1};
  std::uint16_t port = 0;
  bool started = false;
  bool stopped = false;
};

admin_server::admin_server(admin_options options, admin_backend& backend, metrics_registry& metrics)
    : impl_(std::make_unique<impl>(std::move(options), backend, metrics)) {
  auto& s = *impl_;
  const std::string where = s.options.listen.host + ":" + std::to_string(s.options.listen.port);
  if (std::string why = s.options.refusal(); !why.empty()) {
    throw std::runtime_error(why);
  }
  if (!is_loopback_host(s.options.listen.host) &&
      backend.current()->cfg().admin.allowed_hosts.empty()) {
    log_warn("admin.listen " + where +
             " is not a loopback address and admin.allowed_hosts is empty: requests that name "
             "this address in Host are refused until it is listed there");
  }
  s.token_digest = sha256(s.options.token);
  tcp::endpoint ep = resolve_listen(s.options.listen);
  boost::system::error_code ec;
  s.acceptor.open(ep.protocol(), ec);
  if (!ec) {
    s.acceptor.set_option(tcp::acceptor::reuse_address(true), ec);
  }
  if (!ec) {
    s.acceptor.bind(ep, ec);
  }
  if (!ec) {
    s.acceptor.listen(asio::socket_base::max_listen_connections, ec);
  }
  if (ec) {
    throw std::system_error(ec, "admin listen on " + where);
  }
  s.port = s.acceptor.local_endpoint().port();
}

admin_server::~admin_server() {
  stop();
}

std::uint16_t admin_server::port() const {
  return impl_->port;
}

const admin_options& admin_server::options() const {
  return impl_->options;
}

void admin_server::start() {
  auto& s = *impl_;
  if (s.started) {
    return;
  }
  s.started = true;
  asio::co_spawn(s.ioc, s.accept_loop(), log_failure{"admin accept loop"});
  asio::co_spawn(s.ioc, s.sample_loop(), log_failure{"admin sampler"});
  s.thread = std::thread([&s] { s.ioc.run(); });
}

void admin_server::stop() {
  auto& s = *impl_;
  if (s.stopped) {
    return;
  }
  s.stopped = true;
  // Closing every socket ends the admin's own coroutines, but run() would still not run out of
  // work: the Redis store keeps a connection, with a read pending, on every io_context that
  // used it (here: any admin call that reached Redis) for as long as the store lives. So the
  // loop is stopped once the closes have been seen; whatever is still pending (a call waiting
  // for Redis) is destroyed with the io_context, whose shutdown closes the store's connections.
  asio::post(s.ioc, [&s] {
    s.closing = true;
    boost::system::error_code ignored;
    s.acceptor.close(ignored);
    for (admin_connection* c : s.connections) {
      c->stream.socket().close(ignored);
    }
    // Queued after the completions the closes posted, so the coroutines they end run first.
    asio::post(s.ioc, [&s] { s.ioc.stop(); });
  });
  if (s.thread.joinable()) {
    s.thread.join();
  }
  // A reload under way ends first: it uses the runtime, which goes once this returns. Its
  // answer, posted to the stopped loop, is dropped with it, and the one waiting never starts.
  s.reloader.join();
}

std::shared_ptr<admin_server::impl::reload_round> admin_server::impl::join_reload() {
  if (closing) {
    return nullptr;  // stopping waits for a reload under way, and none starts
  }
  if (!running_reload) {
    running_reload = std::make_shared<reload_round>(ioc);
    run_reload(running_reload);
    return running_reload;
  }
  // The one running may have read the file before this request's change to it.
  if (!next_reload) {
    next_reload = std::make_shared<reload_round>(ioc);
  }
  return next_reload;
}

void admin_server::impl::run_reload(std::shared_ptr<reload_round> round) {
  asio::post(reloader, [this, round = std::move(round)]() mutable {
    reload_result result;
    try {
      result = backend.reload();
    } catch (const std::exception& e) {
      result = {false, e.what()};
    } catch (...) {
      result = {false, "the reload failed"};
    }
    asio::post(ioc, [this, round = std::move(round), result = std::move(result)]() mutable {
      round->result = std::move(result);
      round->done.cancel();
      running_reload = std::move(next_reload);
      if (running_reload && !closing) {
        run_reload(running_reload);
      }
    });
  });
}

asio::awaitable<void> admin_server::impl::accept_loop() {
  for (;;) {
    auto [ec, socket] = co_await acceptor.async_accept(use_tuple);
    if (ec == asio::error::operation_aborted || !acceptor.is_open()) {
      co_return;
    }
    if (ec) {
      log_error("admin accept failed: " + ec.message());
      continue;
    }
    if (!make_room(backend.current()->cfg().admin.max_connections)) {
      // Every connection is in the middle of a request.
      boost::system::error_code ignored;
      socket.close(ignored);
      continue;
    }
    auto connection = std::make_unique<admin_connection>(std::move(socket), connections);
    connection->waiting_since = ++wait_order;
    asio::co_spawn(ioc, serve(std::move(connection)), log_failure{"admin connection"});
  }
}

// Closes connections until one more fits under `max_connections` (a reload may have lowered
// it): the idle one that has waited longest, else the one whose head has been awaited longest,
// as the proxy's listener does; false when every one is serving a request. An idle connection
// is the cheap one to lose (a client retries on a new one), and a crowd of them (a scraper's
// pool) must not lock out /healthz; nor a crowd of heads that never end, sent without a token
// by anyone who reaches the port.
bool admin_server::impl::make_room(std::size_t max_connections) {
  using phase = admin_connection::phase;
  while (connections.size() >= max_connections) {
    admin_connection* closed = nullptr;
    for (admin_connection* c : connections) {
      if (c->at != phase::busy &&
          (closed == nullptr ||
           std::pair(c->at, c->waiting_since) < std::pair(closed->at, closed->waiting_since))) {
        closed = c;
      }
    }
    if (closed == nullptr) {
      return false;
    }
    // Out of the count now; its coroutine ends when the cancelled read completes.
    connections.erase(closed);
    closed->at = phase::busy;
    closed->stream.close();
  }
  return true;
}

asio::awaitable<void> admin_server::impl::serve(std::unique_ptr<admin_connection> connection) {
  admin_connection& c = *connection;
  for (;;) {
    http::request_parser<http::string_body> parser;
    // Closed, timed out, malformed or closed to make room: an admin client gets no second
    // chance. A body past k_max_body_bytes, declared in the head or found while reading it,
    // gets its 413 (after the head's own refusal, if any) and the connection is closed.
    const boost::system::error_code head = co_await read_head(c, parser);
    if (head && head != http::error::body_limit) {
      break;
    }
    // A request that will be refused is answered before its body is read, and the connection
    // closed after it: a client without the token cannot hold a connection with a slow body.
    std::optional<response> refused = refuse(parser.get());
    bool too_large = false;
    if (!refused) {
      const boost::system::error_code body = head ? head : co_await read_body(c, parser);
      too_large = body == http::error::body_limit;
      if (too_large) {
        refused = error_response(http::status::payload_too_large,
                                 "an admin request body is at most 64 KiB");
      } else if (body) {
        break;
      }
    }
    const bool body_unread = !parser.is_done();
    const bool client_keeps = client_keeps_alive(parser);
    request req = parser.release();
    response res = co_await respond(req, std::move(refused));
    if (body_unread || !client_keeps) {
      res.keep_alive(false);
    }
    c.stream.expires_after(k_io_timeout);
    auto [wec, wn] = co_await http::async_write(c.stream, res, use_tuple);
    if (!wec && too_large) {
      co_await linger(c);  // the client, which has the token, is still sending its body
    }
    if (wec || !res.keep_alive()) {
      break;
    }
  }
  boost::system::error_code ignored;
  c.stream.socket().shutdown(tcp::socket::shutdown_both, ignored);
}

// After an answer to a request whose body was left unread: its sending side closed, what the
// client still sends is read and dropped for a moment, so that closing with it unread does not
// reset the connection and destroy the answer before the client has read it (the proxy's
// linger_close, nginx's lingering close).
asio::awaitable<void> admin_server::impl::linger(admin_connection& c) {
  boost::system::error_code ignored;
  c.stream.socket().shutdown(tcp::socket::shutdown_send, ignored);
  c.stream.expires_after(k_linger_time);
  std::array<char, 16 * 1024> scratch;
  for (std::size_t dropped = 0; dropped < k_linger_bytes;) {
    auto [ec, n] = co_await c.stream.async_read_some(asio::buffer(scratch), use_tuple);
    if (ec) {
      break;
    }
    dropped += n;
  }
}

// The next request head, within admin.header_timeout of the moment the connection began to
// wait for it (the idle gap between keep-alive requests counts). Any error closes the
// connection but body_limit: the head is whole, and declares a body past k_max_body_bytes.
asio::awaitable<boost::system::error_code> admin_server::impl::read_head(
    admin_connection& c, http::request_parser<http::string_body>& parser) {
  parser.header_limit(k_max_header_bytes);
  parser.body_limit(k_max_body_bytes);
  using phase = admin_connection::phase;
  c.stream.expires_after(backend.current()->cfg().admin.header_timeout);
  c.waiting_since = ++wait_order;
  if (c.buffer.size() == 0) {
    c.at = phase::idle;
    auto [ec, n] =
        co_await c.stream.async_read_some(c.buffer.prepare(k_first_read_bytes), use_tuple);
    if (ec) {
      co_return ec;
    }
    c.buffer.commit(n);
  }
  c.at = phase::head;
  auto [hec, hn] = co_await http::async_read_header(c.stream, c.buffer, parser, use_tuple);
  c.at = phase::busy;
  co_return hec;
}

// The body of a request that passed refuse(), within admin.header_timeout too: admin bodies
// are small (at most k_max_body_bytes) and come at once from any real client.
asio::awaitable<boost::system::error_code> admin_server::impl::read_body(
    admin_connection& c, http::request_parser<http::string_body>& parser) {
  if (parser.is_done()) {
    co_return boost::system::error_code{};
  }
  c.stream.expires_after(backend.current()->cfg().admin.header_timeout);
  auto [ec, n] = co_await http::async_read(c.stream, c.buffer, parser, use_tuple);
  co_return ec;
}

// The response to `req`, with the fields every admin response carries.
asio::awaitable<response> admin_server::impl::respond(const request& req,
                                                      std::optional<response> refused) {
  response res;
  if (refused) {
    res = std::move(*refused);
  } else {
    try {
      res = co_await handle(req);
    } catch (const std::exception& e) {
      // A store that failed (Redis down) must not take the admin API with it.
      res = error_response(http::status::service_unavailable, e.what());
    }
  }
  // HTTP/1.1's status line to an HTTP/1.0 client too (RFC 9110 §6.2), as the proxy answers;
  // such a client keeps the connection only when told so.
  res.version(11);
  // A request without a usable Host is not worth a second one on the same connection.
  const bool keep_alive = req.keep_alive() && res.result() != http::status::bad_request;
  res.keep_alive(keep_alive);
  if (keep_alive && req.version() < 11) {
    res.set(http::field::connection, "keep-alive");
  }
  res.set(http::field::server, "ratewall-admin");
  res.set(http::field::cache_control, "no-store");
  if (req.method() == http::verb::head) {
    res.content_length(res.body().size());
    res.body().clear();
  } else {
    res.prepare_payload();
  }
  co_return res;
}

// What refuses a request on its head alone: screen(), then the token. Probes stay open: a load
// balancer or kubelet should not need the token, and they tell nothing beyond "up" and
// "ready". Changes always need the token; reads need it when there is one (without one, a read
// is open, on a listener that is then loopback-only).
std::optional<response> admin_server::impl::refuse(const request& req) const {
  if (auto refused = screen(req)) {
    return refused;
  }
  const std::string_view target = req.target();
  const std::string_view path = target.substr(0, target.find('?'));
  if (path == "/healthz" || path == "/readyz") {
    return std::nullopt;
  }
  const bool read = req.method() == http::verb::get || req.method() == http::verb::head;
  // /admin/keys shows every key's SHA-256 (a short key could be guessed from it offline): it
  // is never open, reads included.
  const bool keys = path == "/admin/keys" || path.starts_with("/admin/keys/");
  if ((!read || keys) && options.token.empty()) {
    return error_response(http::status::forbidden,
                          "no admin token is configured: set " + options.token_env +
                              " in the gateway's environment to enable this endpoint");
  }
  // A browser can send the token only as a Basic password (any user name), after asking for
  // it: the dashboard, which is for browsers, takes it that way too, for reads. Changes never
  // do: a browser would send remembered Basic credentials with another site's form.
  const bool dashboard = read && (path == "/dashboard" || path == "/admin/dashboard");
  if (!options.token.empty() && !bearer_matches(req) && !(dashboard && basic_matches(req))) {
    response res = error_response(http::status::unauthorized,
                                  "this endpoint needs \"Authorization: Bearer <token>\" (the "
                                  "value of $" +
                                      options.token_env + ")");
    res.set(http::field::www_authenticate, R"(Bearer realm="ratewall-admin")");
    if (dashboard) {
      res.insert(http::field::www_authenticate, R"(Basic realm="ratewall-admin", charset="UTF-8")");
    }
    return res;
  }
  return std::nullopt;
}

// The checks every request passes before any endpoint, /healthz included: a Host this
// machine answers to, and no sign of a browser sending it on behalf of another site.
std::optional<response> admin_server::impl::screen(const request& req) const {
  auto [first, last] = req.equal_range(http::field::host);
  const auto hosts = std::distance(first, last);
  if (hosts == 0 && req.version() >= 11) {
    return error_response(http::status::bad_request, "Host is required in HTTP/1.1");
  }
  if (hosts > 1) {
    return error_response(http::status::bad_request, "Host: more than one");
  }
  if (hosts == 1) {
    auto host = host_of(first->value());
    if (!host) {
      return error_response(http::status::bad_request, "Host: expected host[:port]");
    }
    auto gw = backend.current();
    if (!host_allowed(*host, gw->cfg().admin.allowed_hosts)) {
      return error_response(http::status::forbidden,
                            "Host \"" + *host +
                                "\" is not allowed: the admin API answers to loopback addresses, "
                                "localhost and the names in admin.allowed_hosts (protection "
                                "against DNS rebinding)");
    }
  }
  // Browsers add Origin to every cross-origin request and to every POST, and Sec-Fetch-Site
  // to requests for loopback and https origins; curl, Prometheus and probes send neither. The
  // admin API's one page, /dashboard, polls with same-origin GETs (no Origin, Sec-Fetch-Site
  // same-origin): a request from any other page is someone else's.
  bool cross_site = req.find(http::field::origin) != req.end();
  auto [site, site_end] = req.equal_range("Sec-Fetch-Site");
  for (; site != site_end; ++site) {
    std::string_view value = trim(site->value());
    cross_site = cross_site || (value != "none" && value != "same-origin");
  }
  if (cross_site) {
    return error_response(http::status::forbidden,
                          "cross-site request refused: the admin API does not answer requests "
                          "from web pages (Origin, or Sec-Fetch-Site other than none or "
                          "same-origin)");
  }
  return std::nullopt;
}

bool admin_server::impl::bearer_matches(const request& req) const {
  auto it = req.find(http::field::authorization);
  if (it == req.end()) {
    return false;
  }
  auto token = credentials(it->value(), "bearer ");
  return token && constant_time_equal(sha256(*token), token_digest);
}

bool admin_server::impl::basic_matches(const request& req) const {
  auto it = req.find(http::field::authorization);
  if (it == req.end()) {
    return false;
  }
  auto encoded = credentials(it->value(), "basic ");
  auto user_password = encoded ? base64_decode(*encoded) : std::nullopt;
  if (!user_password) {
    return false;
  }
  const auto colon = user_password->find(':');
  if (colon == std::string::npos) {
    return false;
  }
  return constant_time_equal(sha256(std::string_view(*user_password).substr(colon + 1)),
                             token_digest);
}

asio::awaitable<response> admin_server::impl::handle(const request& req) {
  std::string_view target = req.target();
  auto qmark = target.find('?');
  std::string_view path = target.substr(0, qmark);
  query_params q =
      parse_query(qmark == std::string_view::npos ? std::string_view() : target.substr(qmark + 1));
  const http::verb method = req.method();
  const bool read = method == http::verb::get || method == http::verb::head;

  // Probes stay open: a load balancer or kubelet should not need the token, and they tell
  // nothing beyond "up" and "ready".
  if (path == "/healthz") {
    if (!read) {
      co_return method_not_allowed("GET, HEAD");
    }
    response res{http::status::ok, 11};
    res.set(http::field::content_type, "text/plain; charset=utf-8");
    res.body() = "ok\n";
    co_return res;
  }
  if (path == "/readyz") {
    if (!read) {
      co_return method_not_allowed("GET, HEAD");
    }
    readiness r = backend.ready();
    co_return json_response(r.ready ? http::status::ok : http::status::service_unavailable,
                            json{{"ready", r.ready}, {"detail", r.detail}});
  }

  if (!q.valid) {
    co_return error_response(http::status::bad_request, "malformed query string");
  }

  if (path == "/metrics") {
    if (!read) {
      co_return method_not_allowed("GET, HEAD");
    }
    response res{http::status::ok, 11};
    res.set(http::field::content_type, k_metrics_content_type);
    res.body() = metrics.render();
    co_return res;
  }
  if (path == "/admin/limits") {
    if (read) {
      co_return co_await get_limits(q);
    }
    if (method == http::verb::delete_) {
      co_return co_await delete_limits(q);
    }
    co_return method_not_allowed("GET, HEAD, DELETE");
  }
  if (path == "/admin/reset-all") {
    if (method != http::verb::post) {
      co_return method_not_allowed("POST");
    }
    auto gw = backend.current();
    std::size_t cleared = co_await gw->limits().reset_all();
    log_info("admin: reset all limit state (" + std::to_string(cleared) + " entries)");
    co_return json_response(http::status::ok, json{{"cleared", cleared}});
  }
  if (path == "/admin/reload") {
    if (method != http::verb::post) {
      co_return method_not_allowed("POST");
    }
    // A reload reads the file and its certificates and looks the upstreams' names up: seconds
    // with a million api_keys or a slow DNS server. On a thread of its own, /healthz, /readyz
    // and /metrics are answered meanwhile (a SIGHUP's reload runs on the main thread).
    const std::shared_ptr<reload_round> round = join_reload();
    if (!round) {
      co_return json_response(http::status::service_unavailable,
                              json{{"reloaded", false}, {"error", "the gateway is stopping"}});
    }
    while (!round->result) {
      co_await round->done.async_wait(use_tuple);
    }
    const reload_result& r = *round->result;
    if (r.ok) {
      co_return json_response(http::status::ok, json{{"reloaded", true}});
    }
    co_return json_response(http::status::unprocessable_entity,
                            json{{"reloaded", false}, {"error", r.error}});
  }
  if (path == "/admin/config") {
    if (!read) {
      co_return method_not_allowed("GET, HEAD");
    }
    auto gw = backend.current();
    response res{http::status::ok, 11};
    res.set(http::field::content_type, "application/json");
    res.body() = effective_config_json(gw->cfg(), !options.token.empty());
    co_return res;
  }
  if (path == "/admin/top") {
    if (!read) {
      co_return method_not_allowed("GET, HEAD");
    }
    co_return co_await top(q);
  }
  if (path == "/admin/keys" || path.starts_with("/admin/keys/")) {
    co_return co_await keys(req, path, q);
  }
  if (path == "/dashboard") {
    if (!read) {
      co_return method_not_allowed("GET, HEAD");
    }
    co_return dashboard_page_response();
  }
  if (path == "/admin/dashboard") {
    if (!read) {
      co_return method_not_allowed("GET, HEAD");
    }
    co_return co_await dashboard_data();
  }
  co_return error_response(http::status::not_found, "no such endpoint");
}

admin_server::impl::named_subject admin_server::impl::subject_of(const gateway& gw,
                                                                 const query_params& q) const {
  named_subject out;
  auto spec = q.get("subject");
  if (!spec || spec->empty()) {
    out.error = error_response(http::status::bad_request,
                               "subject is required: api_key:<key>, user:<id>, ip:<address> or "
                               "subject:<subject>");
    return out;
  }
  std::string error;
  out.who = gw.identity().resolve_named(*spec, &error);
  if (!out.who) {
    out.error = error_response(http::status::bad_request, "subject: " + error);
  }
  return out;
}

namespace {

// The route named by ?route=: its index, nullopt when absent, or an error response.
std::optional<response> find_route(const config& cfg, const query_params& q,
                                   std::optional<std::size_t>& index) {
  auto name = q.get("route");
  if (!name) {
    return std::nullopt;
  }
  for (std::size_t i = 0; i < cfg.routes.size(); ++i) {
    if (cfg.routes[i].name == *name) {
      index = i;
      return std::nullopt;
    }
  }
  return error_response(http::status::not_found, "no route named \"" + *name + "\"");
}

}  // namespace

asio::awaitable<response> admin_server::impl::get_limits(const query_params& q) {
  auto gw = backend.current();  // held: the views below point into it
  const config& cfg = gw->cfg();
  named_subject named = subject_of(*gw, q);
  if (named.error) {
    co_return std::move(*named.error);
  }
  std::optional<std::size_t> only;
  if (auto error = find_route(cfg, q, only)) {
    co_return std::move(*error);
  }
  const identity_result& who = *named.who;
  json routes = json::array();
  for (std::size_t r = 0; r < cfg.routes.size(); ++r) {
    const route_config& route = cfg.routes[r];
    if ((only && *only != r) || (!only && route.limits.empty())) {
      continue;
    }
    std::vector<decision> states = co_await gw->limits().status(who.subject, r, who.plan);
    auto policies = gw->limits().policies(r, who.plan);
    json limits = json::array();
    for (std::size_t i = 0; i < states.size() && i < route.limits.size(); ++i) {
      const decision& d = states[i];
      json retry =
          d.impossible || d.retry_after == k_never ? json(nullptr) : json(ceil_ms(d.retry_after));
      limits.push_back(json{{"name", route.limits[i].name},
                            {"algorithm", to_string(route.limits[i].algo)},
                            {"limit", d.limit},
                            {"remaining", d.remaining},
                            {"reset_after_ms", ceil_ms(d.reset_after)},
                            {"allowed", d.allowed},
                            {"retry_after_ms", retry},
                            {"shadow", i < policies.size() && policies[i].shadow}});
    }
    json entry{{"route", route.name}, {"limits", limits}};
    if (const auto& adaptive = gw->adaptive(r)) {
      // The limits above are what applies now: the configured ones × this.
      entry["adaptive_factor"] = adaptive->factor();
    }
    routes.push_back(std::move(entry));
  }
  co_return json_response(http::status::ok,
                          json{{"subject", who.subject},
                               {"plan", who.plan.empty() ? json(nullptr) : json(who.plan)},
                               {"routes", routes}});
}

asio::awaitable<response> admin_server::impl::delete_limits(const query_params& q) {
  auto gw = backend.current();
  named_subject named = subject_of(*gw, q);
  if (named.error) {
    co_return std::move(*named.error);
  }
  std::optional<std::size_t> only;
  if (auto error = find_route(gw->cfg(), q, only)) {
    co_return std::move(*error);
  }
  const std::string& subject = named.who->subject;
  std::size_t cleared = co_await gw->limits().reset(subject, only);
  log_info("admin: reset " + subject_hash(subject, options.hash_key) +
           (only ? " on route " + gw->cfg().routes[*only].name : std::string(" on every route")));
  co_return json_response(http::status::ok,
                          json{{"subject", subject},
                               {"route", only ? json(gw->cfg().routes[*only].name) : json(nullptr)},
                               {"cleared", cleared}});
}

asio::awaitable<response> admin_server::impl::top(const query_params& q) {
  std::size_t n = 10;
  if (auto text = q.get("n")) {
    std::uint64_t v = 0;
    auto [end, ec] = std::from_chars(text->data(), text->data() + text->size(), v);
    if (ec != std::errc() || end != text->data() + text->size() || v < 1 || v > k_max_top) {
      co_return error_response(http::status::bad_request,
                               "n: expected a number from 1 to " + std::to_string(k_max_top));
    }
    n = static_cast<std::size_t>(v);
  }
  co_return json_response(http::status::ok, co_await top_json(backend.current(), n));
}

// The `n` subjects denied most in admin.top_window, and the window: /admin/top's body.
asio::awaitable<json> admin_server::impl::top_json(std::shared_ptr<const gateway> gw,
                                                   std::size_t n) const {
  std::vector<denied_subject> entries = co_await gw->limits().top_denied(n);
  json list = json::array();
  for (const auto& e : entries) {
    json item{{"subject", e.subject},
              {"subject_hash", subject_hash(e.subject, options.hash_key)},
              {"denied", e.denied}};
    // A key with a name is shown by it: operators know "acme", not key:3f9c….
    if (auto key = gw->keys()->find_subject(e.subject); key && !key->meaning.name.empty()) {
      item["name"] = key->meaning.name;
    }
    list.push_back(std::move(item));
  }
  // Whole seconds as an integer (the usual case: 10m is 600), a window like 1500ms as 1.5.
  const nanos window = gw->cfg().admin.top_window;
  const json window_seconds =
      window % std::chrono::seconds(1) == nanos{0}
          ? json(std::chrono::duration_cast<std::chrono::seconds>(window).count())
          : json(std::chrono::duration<double>(window).count());
  co_return json{{"top", list}, {"window_seconds", window_seconds}};
}

// Samples the counters at least once per bucket, so that the history has no gap when nobody
// watches the dashboard. Ends when the io_context stops.
asio::awaitable<void> admin_server::impl::sample_loop() {
  asio::steady_timer timer(ioc);
  for (;;) {
    sample();
    // Just after the next bucket starts: the first sample of a bucket is its edge, and the
    // counts between edges are the buckets' (rate_history).
    const nanos now = clock.now();
    timer.expires_after(history.next_edge(now) - now + k_edge_delay);
    auto [ec] = co_await timer.async_wait(use_tuple);
    if (ec) {
      co_return;
    }
  }
}

void admin_server::impl::sample() {
  history.record(clock.now(), metrics.totals_by_route());
}

response admin_server::impl::dashboard_page_response() const {
  response res{http::status::ok, 11};
  res.set(http::field::content_type, "text/html; charset=utf-8");
  res.set("Content-Security-Policy", k_dashboard_csp);
  res.set("X-Content-Type-Options", "nosniff");
  res.set("X-Frame-Options", "DENY");
  res.set("Referrer-Policy", "no-referrer");
  res.body() = dashboard_page();
  return res;
}

namespace {

json counts_json(const std::vector<bucket_counts>& counts, std::uint64_t bucket_counts::*field) {
  json out = json::array();
  for (const bucket_counts& c : counts) {
    out.push_back(c.*field);
  }
  return out;
}

std::uint64_t sum(const std::vector<bucket_counts>& counts, std::uint64_t bucket_counts::*field,
                  std::size_t last = SIZE_MAX) {
  std::uint64_t total = 0;
  const std::size_t from = last < counts.size() ? counts.size() - last : 0;
  for (std::size_t i = from; i < counts.size(); ++i) {
    total += counts[i].*field;
  }
  return total;
}

// Passive health, from what the routes saw in the last minute: no traffic says nothing
// ("idle"); failures without a response are "down", with some "degraded".
std::string_view health(std::uint64_t responses, std::uint64_t failures) {
  if (failures == 0) {
    return responses == 0 ? "idle" : "up";
  }
  return responses == 0 ? "down" : "degraded";
}

// routes[].adaptive of a route on the dashboard: the factor now, the settings, and the last
// window that ended (null before the first).
json adaptive_json(const adaptive_route& route) {
  const adaptive_route::status s = route.read();
  const auto ms = [](nanos d) { return std::chrono::duration<double, std::milli>(d).count(); };
  json out{{"factor", s.factor},
           {"min_factor", s.cfg.min_factor},
           {"window_seconds", std::chrono::duration<double>(s.cfg.window).count()},
           {"latency_target_ms",
            s.cfg.latency_target > nanos{0} ? json(ms(s.cfg.latency_target)) : json(nullptr)},
           {"error_rate_target",
            s.cfg.error_rate_target ? json(*s.cfg.error_rate_target) : json(nullptr)},
           {"windows", s.windows},
           {"last_window", nullptr}};
  if (s.last) {
    out["last_window"] = json{{"exchanges", s.last->exchanges},
                              {"errors", s.last->errors},
                              {"mean_latency_ms", ms(s.last->mean_latency)},
                              {"error_rate", s.last->error_rate}};
  }
  return out;
}

json store_json(const store_status& s, const readiness& ready) {
  json out{{"kind", s.kind}, {"ready", ready.ready}, {"detail", ready.detail}};
  if (s.kind == "memory") {
    out["rows"] = s.rows;
    out["evictions"] = s.evictions;
    out["full"] = s.full;
    return out;
  }
  json breakers = json::array();
  for (const auto& [address, state] : s.breakers) {
    breakers.push_back(json{{"node", address}, {"breaker", state}});
  }
  out["errors"] = s.errors;
  out["fallback_decisions"] = s.fallback_decisions;
  out["breakers"] = breakers;
  return out;
}

}  // namespace

// GET /admin/dashboard: everything the page draws, in one read.
asio::awaitable<response> admin_server::impl::dashboard_data() {
  sample();
  auto gw = backend.current();
  const config& cfg = gw->cfg();

  json routes = json::array();
  std::map<std::string, std::pair<std::uint64_t, std::uint64_t>> upstream_minute;
  for (std::size_t r = 0; r < cfg.routes.size(); ++r) {
    const route_config& route = cfg.routes[r];
    const std::vector<bucket_counts> counts = history.counts(route.name);
    auto& [responses, failures] = upstream_minute[route.upstream];
    responses += sum(counts, &bucket_counts::upstream_responses, k_health_buckets);
    failures += sum(counts, &bucket_counts::upstream_failures, k_health_buckets);
    routes.push_back(json{{"route", route.name},
                          {"upstream", route.upstream},
                          {"allowed", counts_json(counts, &bucket_counts::allowed)},
                          {"denied", counts_json(counts, &bucket_counts::denied)},
                          {"shadow_denied", counts_json(counts, &bucket_counts::shadow_denied)},
                          {"totals",
                           {{"allowed", sum(counts, &bucket_counts::allowed)},
                            {"denied", sum(counts, &bucket_counts::denied)},
                            {"shadow_denied", sum(counts, &bucket_counts::shadow_denied)}}}});
    if (const auto& adaptive = gw->adaptive(r)) {
      routes.back()["adaptive"] = adaptive_json(*adaptive);
    }
  }

  json effective = json::parse(effective_config_json(cfg, !options.token.empty()));
  json upstreams = json::array();
  for (const upstream_config& u : cfg.upstreams) {
    const auto [responses, failures] = upstream_minute[u.name];
    const auto& budget = gw->budget(u.name);
    upstreams.push_back(json{{"name", u.name},
                             {"targets", effective["upstreams"][u.name]["targets"]},
                             {"health", health(responses, failures)},
                             {"responses_last_minute", responses},
                             {"failures_last_minute", failures},
                             {"connections_in_use", budget->in_use()},
                             {"max_connections", u.max_connections}});
  }

  json top = co_await top_json(gw, k_dashboard_top);
  json body{{"bucket_seconds", std::chrono::duration<double>(history.bucket_width()).count()},
            {"current_bucket_seconds", std::chrono::duration<double>(history.filling()).count()},
            {"routes", routes},
            {"top", top["top"]},
            {"top_window_seconds", top["window_seconds"]},
            {"upstreams", upstreams},
            {"store", store_json(gw->limits().shared_store()->status(), backend.ready())},
            {"config", std::move(effective)}};
  co_return json_response(http::status::ok, body);
}

namespace {

constexpr std::size_t k_default_key_page = 100;
constexpr std::size_t k_max_key_page = 10000;

json key_json(const key_registry& keys, const listed_key& k) {
  return json{{"sha256", to_hex(k.sha256)},
              {"plan", k.meaning.plan},
              {"name", k.meaning.name.empty() ? json(nullptr) : json(k.meaning.name)},
              {"subject", keys.subject(k.sha256)},
              {"source", k.from_config ? "config" : "admin"}};
}

// The first 8 hex digits of a key's SHA-256: enough for an operator to tell keys apart in the
// log, too few to look one up.
std::string short_sha(const sha256_digest& sha256) {
  return to_hex(sha256.data(), 4);
}

}  // namespace

asio::awaitable<response> admin_server::impl::keys(const request& req, std::string_view path,
                                                   const query_params& q) {
  const http::verb method = req.method();
  const bool read = method == http::verb::get || method == http::verb::head;
  if (path == "/admin/keys") {
    if (!read) {
      co_return method_not_allowed("GET, HEAD");
    }
    co_return co_await list_keys(q);
  }
  const auto sha256 = sha256_from_hex(path.substr(std::string_view("/admin/keys/").size()));
  if (!sha256) {
    co_return error_response(http::status::bad_request,
                             "expected /admin/keys/<64 hex digits: the SHA-256 of the key>");
  }
  if (read) {
    auto gw = backend.current();
    const std::shared_ptr<key_registry>& keys = gw->keys();
    auto found = keys->find_subject(keys->subject(*sha256));
    if (!found) {
      co_return error_response(http::status::not_found, "no such key");
    }
    co_return json_response(http::status::ok, key_json(*keys, *found));
  }
  if (method == http::verb::put) {
    co_return co_await put_key(req, *sha256);
  }
  if (method == http::verb::delete_) {
    co_return co_await delete_key(*sha256);
  }
  co_return method_not_allowed("GET, HEAD, PUT, DELETE");
}

asio::awaitable<response> admin_server::impl::list_keys(const query_params& q) {
  std::size_t limit = k_default_key_page;
  if (auto text = q.get("limit")) {
    std::uint64_t v = 0;
    auto [end, ec] = std::from_chars(text->data(), text->data() + text->size(), v);
    if (ec != std::errc() || end != text->data() + text->size() || v < 1 || v > k_max_key_page) {
      co_return error_response(http::status::bad_request, "limit: expected a number from 1 to " +
                                                              std::to_string(k_max_key_page));
    }
    limit = static_cast<std::size_t>(v);
  }
  std::optional<sha256_digest> after;
  if (auto text = q.get("after")) {
    after = sha256_from_hex(*text);
    if (!after) {
      co_return error_response(http::status::bad_request,
                               "after: expected 64 hex digits (the last sha256 of a page)");
    }
  }
  auto gw = backend.current();
  const std::shared_ptr<key_registry>& keys = gw->keys();
  std::vector<listed_key> page = keys->list(q.get("plan"), after, limit);
  json list = json::array();
  for (const listed_key& k : page) {
    list.push_back(key_json(*keys, k));
  }
  // A full page may have more after it; the next one starts after its last key.
  json next = page.size() == limit ? json(to_hex(page.back().sha256)) : json(nullptr);
  co_return json_response(http::status::ok, json{{"keys", list}, {"next_after", next}});
}

asio::awaitable<response> admin_server::impl::put_key(const request& req,
                                                      const sha256_digest& sha256) {
  json body = json::parse(req.body(), nullptr, false);
  if (!body.is_object()) {
    co_return error_response(http::status::bad_request,
                             R"(expected a JSON object: {"plan": "<plan>", "name": "<name>"})");
  }
  for (const auto& [field, value] : body.items()) {
    if (field != "plan" && field != "name") {
      co_return error_response(http::status::bad_request,
                               "unknown field \"" + field + "\" (a key has plan and name)");
    }
  }
  auto plan = body.find("plan");
  if (plan == body.end() || !plan->is_string()) {
    co_return error_response(http::status::bad_request, "plan: expected a plan name");
  }
  key_meaning meaning{plan->get<std::string>(), {}};
  if (auto name = body.find("name"); name != body.end() && !name->is_null()) {
    if (!name->is_string()) {
      co_return error_response(http::status::bad_request, "name: expected a string");
    }
    meaning.name = name->get<std::string>();
    if (std::string problem = key_name_problem(meaning.name); !problem.empty()) {
      co_return error_response(http::status::unprocessable_entity, "name: " + problem);
    }
  }
  auto gw = backend.current();
  const std::vector<std::string>& plans = gw->cfg().plans;
  if (std::find(plans.begin(), plans.end(), meaning.plan) == plans.end()) {
    std::string declared;
    for (const std::string& p : plans) {
      declared += (declared.empty() ? "" : ", ") + p;
    }
    co_return error_response(http::status::unprocessable_entity,
                             "unknown plan \"" + meaning.plan + "\" (declared under plans: " +
                                 (declared.empty() ? "none" : declared) + ")");
  }
  const bool existed = gw->keys()->find(sha256).has_value();
  const std::string log_text = "admin: key " + short_sha(sha256) + " set to plan " + meaning.plan +
                               (meaning.name.empty() ? "" : ", name " + meaning.name);
  key_change change{sha256, meaning};
  if (std::string error = co_await backend.change_key(std::move(change)); !error.empty()) {
    log_error("admin: key " + short_sha(sha256) + " not changed: " + error);
    co_return error_response(http::status::service_unavailable,
                             "the change could not be kept: " + error);
  }
  log_info(log_text);
  listed_key now{sha256, std::move(meaning), false};
  co_return json_response(existed ? http::status::ok : http::status::created,
                          key_json(*gw->keys(), now));
}

asio::awaitable<response> admin_server::impl::delete_key(const sha256_digest& sha256) {
  auto gw = backend.current();
  if (!gw->keys()->find(sha256)) {
    co_return error_response(http::status::not_found, "no such key");
  }
  if (std::string error = co_await backend.change_key(key_change{sha256, std::nullopt});
      !error.empty()) {
    log_error("admin: key " + short_sha(sha256) + " not deleted: " + error);
    co_return error_response(http::status::service_unavailable,
                             "the change could not be kept: " + error);
  }
  log_info("admin: key " + short_sha(sha256) + " deleted");
  co_return json_response(http::status::ok, json{{"sha256", to_hex(sha256)}, {"deleted", true}});
}

}  // namespace ratewall
