// The nghttp2 the gateway is built with has what DESIGN §12's HTTP/2 front end relies on: the
// version, and the stream reset rate limit (the rapid-reset attack, CVE-2023-44487) working on
// its own, which Debian 12's 1.52.0 has as a backport. A client session in memory makes the
// frames; no socket is involved.

#include <nghttp2/nghttp2.h>

#include <doctest/doctest.h>

#include <cstdint>
#include <string>
#include <vector>

namespace {

/// What one session sent, as bytes.
std::string drain(nghttp2_session* s) {
  std::string out;
  for (;;) {
    const std::uint8_t* data = nullptr;
    const ssize_t n = nghttp2_session_mem_send(s, &data);
    REQUIRE(n >= 0);
    if (n == 0) {
      return out;
    }
    out.append(reinterpret_cast<const char*>(data), static_cast<std::size_t>(n));
  }
}

struct goaway_seen {
  bool seen = false;
  std::uint32_t error_code = 0;
};

int on_frame_recv(nghttp2_session*, const nghttp2_frame* frame, void* user_data) {
  if (frame->hd.type == NGHTTP2_GOAWAY) {
    auto* g = static_cast<goaway_seen*>(user_data);
    g->seen = true;
    g->error_code = frame->goaway.error_code;
  }
  return 0;
}

}  // namespace

TEST_CASE("nghttp2 is 1.52 or later") {
  const nghttp2_info* info = nghttp2_version(0);
  REQUIRE(info != nullptr);
  CHECK(info->version_num >= 0x013400);
}

TEST_CASE("nghttp2 closes a connection whose client resets streams faster than allowed") {
  nghttp2_session_callbacks* callbacks = nullptr;
  REQUIRE(nghttp2_session_callbacks_new(&callbacks) == 0);
  nghttp2_session_callbacks_set_on_frame_recv_callback(callbacks, on_frame_recv);

  nghttp2_option* option = nullptr;
  REQUIRE(nghttp2_option_new(&option) == 0);
  nghttp2_option_set_stream_reset_rate_limit(option, 10, 1);  // 10 at once, then 1 a second
  nghttp2_option_set_max_continuations(option, 8);

  goaway_seen server_saw;
  goaway_seen client_saw;
  nghttp2_session* server = nullptr;
  nghttp2_session* client = nullptr;
  REQUIRE(nghttp2_session_server_new2(&server, callbacks, &server_saw, option) == 0);
  REQUIRE(nghttp2_session_client_new(&client, callbacks, &client_saw) == 0);
  REQUIRE(nghttp2_submit_settings(server, NGHTTP2_FLAG_NONE, nullptr, 0) == 0);
  REQUIRE(nghttp2_submit_settings(client, NGHTTP2_FLAG_NONE, nullptr, 0) == 0);

  auto nv = [](const char* name, const char* value) {
    return nghttp2_nv{reinterpret_cast<std::uint8_t*>(const_cast<char*>(name)),
                      reinterpret_cast<std::uint8_t*>(const_cast<char*>(value)),
                      std::char_traits<char>::length(name), std::char_traits<char>::length(value),
                      NGHTTP2_NV_FLAG_NONE};
  };
  const std::vector<nghttp2_nv> head = {nv(":method", "GET"), nv(":scheme", "http"),
                                        nv(":path", "/"), nv(":authority", "a")};

  // The rapid reset: open a stream and reset it at once, 50 times in one burst. Each HEADERS is
  // sent before its RST_STREAM is submitted (a client session drops a reset whose HEADERS it
  // has not sent yet, and the HEADERS with it).
  std::string flood;
  for (int i = 0; i < 50; ++i) {
    const std::int32_t id =
        nghttp2_submit_request(client, nullptr, head.data(), head.size(), nullptr, nullptr);
    REQUIRE(id > 0);
    flood += drain(client);
    REQUIRE(nghttp2_submit_rst_stream(client, NGHTTP2_FLAG_NONE, id, NGHTTP2_CANCEL) == 0);
    flood += drain(client);
  }
  const ssize_t read = nghttp2_session_mem_recv(
      server, reinterpret_cast<const std::uint8_t*>(flood.data()), flood.size());
  CHECK(read >= 0);

  // The server answers with GOAWAY, which the client reads.
  const std::string answer = drain(server);
  CHECK(nghttp2_session_mem_recv(client, reinterpret_cast<const std::uint8_t*>(answer.data()),
                                 answer.size()) >= 0);
  CHECK(client_saw.seen);
  CHECK(client_saw.error_code != NGHTTP2_NO_ERROR);
  CHECK_FALSE(nghttp2_session_want_read(server));

  nghttp2_session_del(client);
  nghttp2_session_del(server);
  nghttp2_option_del(option);
  nghttp2_session_callbacks_del(callbacks);
}
