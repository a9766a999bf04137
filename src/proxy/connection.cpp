#include "connection.hpp"

#include "ratewall/proxy/admission.hpp"

namespace ratewall {

asio::awaitable<bool> send_local(connection_state& c, const worker& w, unsigned version,
                                 http::verb method, bool keep_alive, http::status status,
                                 std::string body, std::string_view content_type) {
  c.head.clear();
  write_local_response_head(static_cast<unsigned>(status), version, keep_alive && !w.draining(),
                            body.empty() ? std::string_view{} : content_type, body.size(), c.extra,
                            c.head);
  const std::size_t body_sent = method == http::verb::head ? 0 : body.size();
  std::array<asio::const_buffer, 2> pieces{asio::buffer(c.head), asio::buffer(body, body_sent)};
  c.expires_after(w.current()->cfg().server.idle_timeout);
  auto [ec, n] = co_await asio::async_write(c.client, pieces, use_tuple);
  co_return !ec;
}

asio::awaitable<bool> send_problem(connection_state& c, const worker& w, unsigned version,
                                   http::verb method, bool keep_alive, http::status status,
                                   std::string_view detail) {
  auto code = static_cast<unsigned>(status);
  co_return co_await send_local(c, w, version, method, keep_alive, status,
                                problem_json(code, http::obsolete_reason(status), detail),
                                "application/problem+json");
}

asio::awaitable<bool> wait_for_turn(worker& w, asio::steady_timer& timer, nanos delay,
                                    std::uint64_t& retry_after) {
  using clock = std::chrono::steady_clock;
  const clock::time_point turn = clock::now() + delay;
  if (!w.turn_after_drain(turn)) {
    timer.expires_at(turn);
    worker::turn_wait known(w, timer, turn);
    co_await timer.async_wait(use_tuple);
  }
  if (!w.turn_after_drain(turn)) {
    co_return true;
  }
  const auto left = std::chrono::ceil<std::chrono::seconds>(turn - clock::now()).count();
  retry_after = static_cast<std::uint64_t>(std::max<std::int64_t>(left, 1));
  co_return false;
}

error_code version_not_supported() {
  return make_error_code(boost::system::errc::protocol_not_supported);
}

http::status status_for_read_error(const error_code& ec) {
  if (ec == version_not_supported()) {
    return http::status::http_version_not_supported;
  }
  if (ec == http::error::header_limit) {
    return http::status::request_header_fields_too_large;
  }
  if (ec == http::error::body_limit) {
    return http::status::payload_too_large;
  }
  if (ec == beast::error::timeout) {
    return http::status::request_timeout;
  }
  return http::status::bad_request;
}

http::status status_for_head_error(const error_code& ec, bool line_taken, std::string_view held,
                                   std::size_t max_header_bytes) {
  const http::status status = status_for_read_error(ec);
  if (status != http::status::request_header_fields_too_large || line_taken) {
    return status;
  }
  // A request line that does not end within the bound is a target too long (RFC 9112 §3:
  // 414), as nginx answers it; fields past the bound are 431. Empty lines before the request
  // line (RFC 9112 §2.2) are not part of it.
  const std::size_t start = std::min(held.find_first_not_of("\r\n"), held.size());
  const std::size_t line_end = held.find('\n', start);
  return line_end == std::string_view::npos || line_end - start >= max_header_bytes
             ? http::status::uri_too_long
             : status;
}

http::status status_for_body_error(const error_code& ec) {
  // Beast's header_limit in a body is a chunk line or a trailer section that 64 KiB do not hold
  // (k_max_unparsed_bytes): a malformed chunked body, a 400 as HAProxy answers what does not
  // fit its buffer, not a head's fields.
  return ec == http::error::header_limit ? http::status::bad_request : status_for_read_error(ec);
}

std::string_view head_refused_detail(http::status status) {
  switch (status) {
    case http::status::uri_too_long:
      return "request target too long";
    case http::status::request_timeout:
      return "request head not received in time";
    case http::status::http_version_not_supported:
      return "HTTP version not supported";
    default:
      return "request head refused";
  }
}

std::string_view body_refused_detail(http::status status) {
  switch (status) {
    case http::status::request_timeout:
      return "request body not received in time";
    case http::status::payload_too_large:
      return "request body too large";
    default:
      return "request body refused";
  }
}

bool is_parse_error(const error_code& ec) {
  static const auto& http_errors = make_error_code(http::error::bad_version).category();
  return ec.category() == http_errors && ec != http::error::partial_message &&
         ec != http::error::end_of_stream;
}

bool is_disconnect(const error_code& ec) {
  return ec == http::error::end_of_stream || ec == asio::error::eof ||
         ec == asio::error::connection_reset || ec == asio::error::broken_pipe ||
         ec == asio::error::operation_aborted || ec == http::error::partial_message;
}

asio::awaitable<void> linger_close(connection_state& c) {
  c.expires_after(std::chrono::seconds(1));
  co_await c.client.shutdown_send();
  std::size_t drained = 0;
  while (drained < k_max_discard_bytes) {
    // Below TLS: after close_notify there is nothing to decrypt, only bytes to drain.
    auto [rec, n] = co_await c.client.socket().async_read_some(
        asio::buffer(c.relay.data(), c.relay.size()), use_tuple);
    if (rec) {
      break;
    }
    drained += n;
  }
  c.client.close();
}

bool has_obs_fold(std::string_view head) {
  for (std::size_t i = head.find('\n'); i != std::string_view::npos && i + 1 < head.size();
       i = head.find('\n', i + 1)) {
    if (head[i + 1] == ' ' || head[i + 1] == '\t') {
      return true;
    }
  }
  return false;
}

namespace {

bool is_http_version(std::string_view v) {
  const auto digit = [](char c) { return c >= '0' && c <= '9'; };
  return v.size() == 8 && v.starts_with("HTTP/") && digit(v[5]) && v[6] == '.' && digit(v[7]);
}

}  // namespace

bool accept_later_minor_version(std::span<char> line, error_code& ec) {
  // Beast judges the version as soon as its 8 bytes are there, past the method and the target
  // (each ended by a space), before the CRLF after it may have come.
  const std::string_view held(line.data(), line.size());
  const std::size_t target_end = held.find(' ', held.find(' ') + 1);
  if (target_end == std::string_view::npos || held.size() - (target_end + 1) < 8) {
    return false;
  }
  const std::size_t at = target_end + 1;
  const std::string_view version = held.substr(at, 8);
  const std::string_view after = held.substr(at + 8, 2);
  if (!is_http_version(version) || !std::string_view("\r\n").starts_with(after)) {
    return false;
  }
  if (version[5] != '1') {
    // 505, or 400 if the line goes on past the version: the bytes to come tell.
    ec = after.size() < 2 ? http::error::need_more : version_not_supported();
    return false;
  }
  if (version[7] < '2') {
    return false;  // 1.0 and 1.1 were refused for something else
  }
  line[at + 7] = '1';
  return true;
}

bool accept_later_minor_status_version(std::span<char> line) {
  // Judged as soon as the version's 8 bytes are there, with or without the space after it.
  const std::string_view held(line.data(), line.size());
  if (held.size() < 8 || !is_http_version(held.substr(0, 8)) || held[5] != '1' || held[7] < '2' ||
      (held.size() > 8 && held[8] != ' ')) {
    return false;
  }
  line[7] = '1';
  return true;
}

void refuse_control_in_chunk_extension(std::uint64_t, std::string_view extensions, error_code& ec) {
  if (chunk_extension_has_control(extensions)) {
    ec = http::error::bad_chunk_extension;
  }
}

bool chunk_line_cannot_end(std::string_view unparsed) {
  if (unparsed.starts_with("\r\n")) {
    unparsed.remove_prefix(2);  // the end of the chunk before
  }
  const std::size_t size_end = unparsed.find_first_not_of("0123456789abcdefABCDEF");
  const bool last = size_end != 0 && unparsed.find_first_not_of('0') >= size_end;
  if (!last) {
    // Beast takes a size line once its CRLF is there, unless a quoted string in its extension
    // is still open at that CRLF (it reads the string on, past the line): a line that cannot
    // end, since a quoted string holds no CR or LF (RFC 9110 §5.6.4). A bare LF is none.
    return unparsed.find('\n') != std::string_view::npos;
  }
  // After the last chunk come the trailer's lines and the empty one that ends the body: Beast
  // waits for all of them before it takes any, so each one's end is looked at.
  for (std::size_t lf = unparsed.find('\n'); lf != std::string_view::npos;
       lf = unparsed.find('\n', lf + 1)) {
    if (lf == 0 || unparsed[lf - 1] != '\r') {
      return true;
    }
  }
  return false;
}

}  // namespace ratewall
