#pragma once

// One client connection of the HTTP/2 front end (DESIGN §12): nghttp2 reads and writes the
// frames, the worker's Asio loop does the I/O, and each stream is one request served by the
// steps the HTTP/1.1 session uses (request_steps.hpp) and forwarded by the same exchange
// (exchange.hpp), an h2_stream being its leg. Internal to the proxy module.
//
// Rules that keep nghttp2 and the coroutines apart:
// 1. A callback only records: it appends bytes, sets flags, counts, and wakes a stream (a timer
//    or socket cancelled, whose completion is queued, never run inline). The only nghttp2
//    calls made inside one are nghttp2_submit_rst_stream,
//    nghttp2_session_terminate_session, and nghttp2_submit_trailer from the data source that
//    has just said EOF (where nghttp2's documentation has it called).
// 2. Streams start after nghttp2_session_mem_recv returns, never inside it.
// 3. mem_recv and mem_send run only in the read loop and the write loop. A stream may submit,
//    resume data and consume, then signal_write().
// 4. A stream checks closed_ before any nghttp2 call that names it.

#include <nghttp2/nghttp2.h>

#include <array>
#include <boost/asio/steady_timer.hpp>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "connection.hpp"
#include "exchange.hpp"
#include "ratewall/proxy/h2_fields.hpp"
#include "ratewall/proxy/h2_guard.hpp"
#include "ratewall/proxy/h2_request.hpp"
#include "request_steps.hpp"

namespace ratewall {

class h2_connection;

/// A stream's lists and buffers, kept by its connection when the stream ends and given to a
/// later stream: a connection that serves a steady few streams at a time soon allocates none
/// for them, as an HTTP/1.1 connection keeps its exchange_state from request to request. Each
/// part is emptied first, keeping the room of a usual message, never that of the largest.
struct h2_stream_storage {
  h2_request_builder builder;
  h2_fields fields;
  std::string head;
  header_list extra;
  upstream_response upstream_answer;

  std::size_t room_bytes() const {
    return builder.room_bytes() + fields.room_bytes() + head.capacity() +
           extra.capacity() * sizeof(header_list::value_type) + upstream_answer.room_bytes();
  }
};

/// One stream: a request, its exchange's scratch, and the bytes on their way either side. Held
/// by its connection until nghttp2 closes it and by the coroutine that serves it.
class h2_stream final : public exchange_state {
 public:
  h2_stream(h2_connection& conn, std::int32_t id);
  ~h2_stream();
  h2_stream(const h2_stream&) = delete;
  h2_stream& operator=(const h2_stream&) = delete;

  // The deadline (as connection_state's): one store; the connection's watchdog enforces it.
  void expires_after(nanos d) { expires_at(std::chrono::steady_clock::now() + d); }
  void expires_at(std::chrono::steady_clock::time_point t);
  error_code checked(error_code ec) const {
    if (ec == asio::error::operation_aborted && timed_out_) {
      return beast::error::timeout;
    }
    if (ec == asio::error::operation_aborted && closed_) {
      return asio::error::connection_reset;
    }
    return ec;
  }

  // The exchange's leg (exchange.hpp).
  class hangup_watch {
   public:
    hangup_watch(h2_stream& s, std::function<void()> on_hangup);
    ~hangup_watch();
    hangup_watch(const hangup_watch&) = delete;
    hangup_watch& operator=(const hangup_watch&) = delete;

   private:
    h2_stream& s_;
  };
  exchange_state& state() { return *this; }
  h2_stream& deadline() { return *this; }
  h2_stream& watched() { return *this; }
  unsigned version() const { return 11; }  // the upstream leg's; 1xx are relayed
  http::verb method() const { return head_.method(); }
  bool request_done() const { return body_ended_ && inbound_.empty(); }
  asio::awaitable<relay_status> send_request(upstream_connection& up, nanos body_gap,
                                             nanos write_timeout, std::uint64_t& counted);
  asio::awaitable<error_code> send_interim(const upstream_response& res, nanos write_timeout);
  asio::awaitable<bool> answer(http::status status, std::string_view detail, bool keep_alive);
  asio::awaitable<void> refuse_body(http::status status);
  asio::awaitable<relay_status> send_response(upstream_connection& up, upstream_response_parser& rp,
                                              bool& keep_alive, nanos read_gap, nanos write_timeout,
                                              std::uint64_t& counted, relay_taps taps);
  asio::awaitable<void> after_early_answer();
  void stop_upload() {
    upload_stopped_ = true;
    wake();
  }
  asio::awaitable<void> switch_protocols(upstream_connection&, const upstream_response&, nanos,
                                         nanos, request_trace&) {
    co_return;  // never asked for: an HTTP/2 request carries no Upgrade, so a 101 is refused
  }

  /// Serves the stream's request, once its header block is complete. The stream must go
  /// before its connection however the frame ends (a stop destroys it suspended): `self` is
  /// moved into a local, which goes before any parameter, since GCC 12 destroys a
  /// coroutine's parameter copies in the order they were made.
  static asio::awaitable<void> serve(std::shared_ptr<h2_connection> conn,
                                     std::shared_ptr<h2_stream> self);
  /// The client reset the stream, or the connection ended: every wait of the stream ends.
  void hang_up();

  // Read by the connection's callbacks and loops.
  h2_connection& conn_;
  const std::int32_t id_;
  h2_request_builder builder_;
  std::size_t block_bytes_ = 0;         // its header blocks as decoded, head and trailer together
  request_head head_;                   // before scope_: the trace holds views into it
  std::optional<request_scope> scope_;  // made when the request starts
  std::string inbound_;                 // request body bytes received, not yet taken
  std::size_t inbound_taken_ = 0;       // of inbound_, from its start
  bool body_ended_ = false;             // END_STREAM received
  bool closed_ = false;                 // nghttp2 closed the stream (reset, or done)
  bool timed_out_ = false;
  bool started_ = false;     // its header block is complete: serve() runs for it
  bool head_whole_ = false;  // its header block is complete (started_ follows soon)
  // When its header block began: at max_connections, a connection whose streams are all still
  // in theirs is awaiting a head, as an HTTP/1.1 one may be (drainable::head_since).
  std::chrono::steady_clock::time_point head_since_ = std::chrono::steady_clock::now();
  bool response_done_ = false;  // the response's END_STREAM went out
  bool grpc_ = false;           // a gRPC call on a grpc route: the gateway answers it Trailers-Only
  std::chrono::steady_clock::time_point deadline_ = std::chrono::steady_clock::time_point::max();
  asio::steady_timer wake_;           // a waiting step sleeps on it; events cancel it
  std::function<void()> on_hangup_;   // see hangup_watch
  std::array<char, 16 * 1024> relay;  // one piece of a body on its way (not zeroed: written first)
  // The response body on its way to the client: nghttp2's data source reads it.
  std::string outbound_;
  std::size_t outbound_sent_ = 0;
  bool outbound_end_ = false;
  h2_fields trailer_;  // the upstream's trailer, sent after the body's last DATA (if any)
  bool response_submitted_ = false;
  bool data_deferred_ = false;
  bool abandoned_ = false;  // served: body bytes still arriving are handed back unread,
                            // and the deadline bounds what is left to send
  body_framing framing_ = body_framing::none;  // the request body's, towards the upstream
  std::uint64_t max_body_bytes_ = 0;
  h2_fields fields_;  // the last header block submitted; nghttp2 copies it

  /// Ends the stream with RST_STREAM `code` if nghttp2 still has it open.
  void reset(std::uint32_t code);
  /// The trailer in trailer_, from the data source that has just said EOF (rule 1); false if
  /// nghttp2 refused it.
  bool submit_trailer();

  /// Wakes a step waiting on wake_.
  void wake() { wake_.cancel(); }
  /// Waits for wake() or the deadline; false when the stream closed or timed out meanwhile.
  asio::awaitable<bool> wait();

 private:
  friend class h2_body_source;
  friend class h2_body_sink;
  /// Submits the response head from fields_, with a body to follow when `body`.
  void submit_head(bool body);
  /// Answers locally: `status`, the stream's extra headers, `body` of `content_type`; to a
  /// gRPC call, Trailers-Only with the gRPC code for `status` and `why` as grpc-message.
  void submit_local(unsigned status, std::string_view body, std::string_view content_type,
                    std::string_view why);
  /// Answers locally with a problem document (RFC 9457) saying `detail`.
  void submit_problem(unsigned status, std::string_view detail);
  /// An interim response whose head is in fields_.
  void submit_interim();
  /// Bytes taken from inbound_ are handed back to the flow-control windows.
  void consume(std::size_t n);
  /// Takes the connection's spare storage, if it has some; else makes room for a usual stream.
  void take_storage();
  /// Empties the stream's storage and gives it to the connection, if that keeps it.
  void give_back_storage();
};

/// Serves an HTTP/2 connection on `c`, whose preface (or TLS ALPN "h2") said so and whose
/// buffer holds what was read of it, until it ends. The connection's settings are those of the
/// configuration current now; each request reads the one current when it starts. The
/// connection holds `w`: its streams may outlive the session's frame when a stop destroys the
/// suspended coroutines, and their requests are counted by the worker as they end.
asio::awaitable<void> serve_h2(std::shared_ptr<connection_state> c, std::shared_ptr<worker> w);

/// The connection: nghttp2's session, its two loops and its watchdog.
class h2_connection final : public drainable, public std::enable_shared_from_this<h2_connection> {
 public:
  h2_connection(std::shared_ptr<connection_state> c, std::shared_ptr<worker> w,
                const server_config& server);
  ~h2_connection();
  h2_connection(const h2_connection&) = delete;
  h2_connection& operator=(const h2_connection&) = delete;

  /// Until the connection ends: settings, then the read loop, with the write loop and the
  /// watchdog beside it.
  asio::awaitable<void> run();

  nghttp2_session* session() const { return session_; }
  /// The write loop has something to send.
  void signal_write();
  /// A stream's deadline moved earlier than the watchdog's next wake.
  void deadline_moved(std::chrono::steady_clock::time_point t);

  void drain() override;
  bool close_if_idle() override;
  std::optional<std::chrono::steady_clock::time_point> head_since() const override;
  void evict() override;
  void cut_off() override;

  std::shared_ptr<worker> owner_;  // first: it goes last, after every stream
  std::shared_ptr<connection_state> c_;
  worker& w_;
  const nanos idle_timeout_;
  const nanos header_timeout_;  // bounds a header block (HEADERS to END_HEADERS)
  const std::size_t max_header_bytes_;
  // Request body bytes its streams may hold at once under request_buffering: no more than one
  // HTTP/1.1 connection holds (request_buffer_bytes), or than the client may have in flight
  // (connection_window). A stream that finds it spent streams the rest of its body.
  std::uint64_t buffer_budget_;
  std::unordered_map<std::int32_t, std::shared_ptr<h2_stream>> open_;

 private:
  static int on_begin_frame(nghttp2_session*, const nghttp2_frame_hd*, void*);
  static int on_begin_headers(nghttp2_session*, const nghttp2_frame*, void*);
  static int on_header(nghttp2_session*, const nghttp2_frame*, const std::uint8_t*, std::size_t,
                       const std::uint8_t*, std::size_t, std::uint8_t, void*);
  static int on_frame_recv(nghttp2_session*, const nghttp2_frame*, void*);
  static int on_data_chunk(nghttp2_session*, std::uint8_t, std::int32_t, const std::uint8_t*,
                           std::size_t, void*);
  static int on_invalid_frame_recv(nghttp2_session*, const nghttp2_frame*, int, void*);
  static int on_stream_close(nghttp2_session*, std::int32_t, std::uint32_t, void*);
  static int on_frame_send(nghttp2_session*, const nghttp2_frame*, void*);
  static int on_frame_not_send(nghttp2_session*, const nghttp2_frame*, int, void*);

  h2_stream* find(std::int32_t id) const;
  void start_ready_streams();
  void terminate(std::uint32_t code);
  /// A reset received, or sent for the client's fault: false past the guard's budget, and then
  /// the session ends with GOAWAY ENHANCE_YOUR_CALM.
  bool count_reset();
  asio::awaitable<void> read_loop();
  asio::awaitable<void> write_loop();
  asio::awaitable<void> watchdog();
  bool wants_io() const;

  nghttp2_session* session_ = nullptr;
  h2_guard guard_;
  std::vector<std::shared_ptr<h2_stream>> ready_;  // header block complete, to start
  std::string out_;                                // frames on their way to the client
  std::string last_words_;  // a GOAWAY made by hand after nghttp2 failed, to send last
  asio::steady_timer writer_wake_;
  asio::steady_timer reader_wake_;  // the reader waits for the writer to drain out_
  asio::steady_timer watch_timer_;
  asio::steady_timer streams_ended_;  // run() waits on it for the last stream and the writer
  std::vector<std::pair<std::int32_t, std::size_t>> pending_consume_;
  // Storage of ended streams, for the next ones (h2_stream_storage), and the name/value list
  // handed to nghttp2 for each header block, which nghttp2 copies.
  std::vector<h2_stream_storage> spare_storage_;
  std::size_t spare_bytes_ = 0;  // the room spare_storage_ holds
  std::vector<nghttp2_nv> nv_scratch_;
  std::chrono::steady_clock::time_point watch_wake_ = std::chrono::steady_clock::time_point::max();
  std::chrono::steady_clock::time_point idle_since_;
  const nanos settings_timeout_;
  // Our SETTINGS went out and is not acknowledged yet: the client has until then.
  std::chrono::steady_clock::time_point settings_deadline_ =
      std::chrono::steady_clock::time_point::max();
  // A header block is under way (a HEADERS came without END_HEADERS, its last CONTINUATION
  // has not): it must end by then, header_timeout after its HEADERS, or the connection ends.
  std::chrono::steady_clock::time_point block_deadline_ =
      std::chrono::steady_clock::time_point::max();
  bool writer_waiting_ = false;
  bool reader_waiting_ = false;
  bool done_ = false;      // the connection is over: the loops stop
  bool draining_ = false;  // GOAWAY sent: no new streams
  bool fatal_ = false;     // nghttp2 failed: nothing more is asked of it
  bool writer_done_ = false;
  bool closing_ = false;  // close_if_idle said yes: once
  // Every stream alive: open, or closed while its coroutine still ends. The watchdog bounds
  // them all.
  std::vector<h2_stream*> live_;
  std::uint64_t bytes_read_ = 0;
  std::uint64_t payload_read_ = 0;

  friend class h2_stream;
};

}  // namespace ratewall
