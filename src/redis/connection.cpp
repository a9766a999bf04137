#include "ratewall/redis/connection.hpp"

#include <algorithm>
#include <array>
#include <deque>
#include <optional>

#include <boost/asio/any_completion_handler.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/connect.hpp>
#include <boost/asio/deferred.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>

#include "ratewall/core/log.hpp"
#include "ratewall/core/use_tuple.hpp"

namespace ratewall::redis {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;

namespace {

constexpr std::size_t k_read_chunk = 16 * 1024;

using steady = std::chrono::steady_clock;
using handler_type = asio::any_completion_handler<void(call_result)>;

class connection_impl final : public connection,
                              public std::enable_shared_from_this<connection_impl> {
 public:
  connection_impl(asio::any_io_executor ex, node_address where, connection_options options,
                  std::shared_ptr<connection_counters> counters)
      : ex_(std::move(ex)),
        address_(std::move(where)),
        options_(std::move(options)),
        counters_(std::move(counters)),
        socket_(ex_),
        resolver_(ex_),
        deadline_timer_(ex_),
        connect_timer_(ex_),
        backoff_(options_.backoff_min),
        read_buffer_(k_read_chunk) {}

  asio::awaitable<call_result> call(std::string commands, std::size_t replies, time_point deadline,
                                    bool connect_now) override {
    auto self = shared_from_this();
    co_return co_await asio::async_initiate<const asio::deferred_t&, void(call_result)>(
        [&](auto handler) {
          start_call(std::move(commands), replies, deadline, connect_now,
                     handler_type(std::move(handler)));
        },
        asio::deferred);
  }

  void send(std::string commands, std::size_t replies) override {
    if (state_ == state::closed || !ensure_connecting(false)) {
      return;
    }
    enqueue(std::move(commands), replies, std::nullopt, time_point::max());
  }

  void close() override {
    if (state_ == state::closed) {
      return;
    }
    // Commands queued for this turn's write go out as far as the socket takes them now (a
    // concurrency unit's ZREM, given back just before its store went with a reload): nobody
    // waits for their replies, and dropped they would hold a slot until slot_ttl.
    if (state_ == state::ready && !writing_ && !out_.empty()) {
      boost::system::error_code ignored;
      socket_.non_blocking(true, ignored);
      socket_.send(asio::buffer(out_), 0, ignored);
    }
    drop_connection(call_status::unavailable);
    state_ = state::closed;
    deadline_timer_.cancel();
  }

  bool connected() const override { return state_ == state::ready; }
  const node_address& address() const override { return address_; }

 private:
  enum class state { disconnected, connecting, ready, closed };

  struct pending {
    std::size_t expected = 1;
    std::vector<reply> replies;
    std::optional<handler_type> handler;  // empty: sent with send(), or timed out
    bool wanted = true;                   // false once timed out: nobody reads the replies
    bool forget = false;                  // sent with send(): replies dropped on purpose
    time_point deadline;
    std::string unsent;  // the commands, while the connection is still being made
  };

  // Completes outside the current call stack: the caller resumes from the event loop.
  void complete(handler_type handler, call_result result) {
    asio::post(ex_, [h = std::move(handler), r = std::move(result)]() mutable {
      std::move(h)(std::move(r));
    });
  }

  // True when the connection is up or coming up; starts it when allowed.
  bool ensure_connecting(bool connect_now) {
    if (state_ == state::ready || state_ == state::connecting) {
      return true;
    }
    if (!connect_now && steady::now() < next_attempt_) {
      return false;
    }
    start_connect();
    return true;
  }

  void start_call(std::string commands, std::size_t replies, time_point deadline, bool connect_now,
                  handler_type handler) {
    if (state_ == state::closed || !ensure_connecting(connect_now)) {
      complete(std::move(handler), {call_status::unavailable, {}});
      return;
    }
    if (deadline <= steady::now()) {
      counters_->timeouts.fetch_add(1, std::memory_order_relaxed);
      complete(std::move(handler), {call_status::timeout, {}});
      return;
    }
    enqueue(std::move(commands), replies, std::move(handler), deadline);
    arm_timer(deadline);
  }

  void enqueue(std::string commands, std::size_t replies, std::optional<handler_type> handler,
               time_point deadline) {
    pending p;
    p.expected = replies;
    p.handler = std::move(handler);
    p.wanted = p.handler.has_value();
    p.forget = !p.wanted;
    p.deadline = deadline;
    if (state_ == state::ready) {
      out_ += commands;
      schedule_flush();
    } else {
      p.unsent = std::move(commands);
    }
    if (pending_.empty()) {
      last_progress_ = steady::now();
    }
    pending_.push_back(std::move(p));
  }

  // ------------------------------------------------------------------------------------------
  // Deadlines: one timer for the connection, armed at the earliest deadline it must notice.

  void arm_timer(time_point at) {
    if (at >= timer_at_) {
      return;
    }
    timer_at_ = at;
    deadline_timer_.expires_at(at);
    deadline_timer_.async_wait([self = shared_from_this()](boost::system::error_code ec) {
      if (ec != asio::error::operation_aborted) {
        self->on_timer();
      }
    });
  }

  void on_timer() {
    timer_at_ = time_point::max();
    if (state_ == state::closed) {
      return;
    }
    const time_point now = steady::now();
    time_point next = time_point::max();
    for (pending& p : pending_) {
      if (!p.handler) {
        continue;
      }
      if (p.deadline <= now) {
        counters_->timeouts.fetch_add(1, std::memory_order_relaxed);
        p.wanted = false;
        handler_type h = std::move(*p.handler);
        p.handler.reset();
        complete(std::move(h), {call_status::timeout, {}});
      } else {
        next = std::min(next, p.deadline);
      }
    }
    if (state_ == state::ready && !pending_.empty()) {
      const time_point stuck_at =
          last_progress_ + std::chrono::duration_cast<steady::duration>(options_.stuck_after);
      if (stuck_at <= now) {
        log_warn("redis " + address_.to_string() + ": no reply for " +
                 std::to_string(options_.stuck_after.count() / 1000000) + " ms; reconnecting");
        drop_connection(call_status::failed);
        return;
      }
      next = std::min(next, stuck_at);
    }
    if (next != time_point::max()) {
      arm_timer(next);
    }
  }

  // ------------------------------------------------------------------------------------------
  // Connecting: resolve, TCP, then AUTH / SELECT, all within connect_timeout.

  void start_connect() {
    state_ = state::connecting;
    const std::uint64_t generation = ++generation_;
    asio::co_spawn(ex_, connect(shared_from_this(), generation), log_failure{"Redis connect"});
  }

  asio::awaitable<void> connect(std::shared_ptr<connection_impl> self, std::uint64_t generation) {
    bool timed_out = false;
    connect_timer_.expires_after(options_.connect_timeout);
    connect_timer_.async_wait([this, self, generation, &timed_out](boost::system::error_code ec) {
      if (!ec && generation == generation_ && state_ == state::connecting) {
        timed_out = true;
        boost::system::error_code ignored;
        resolver_.cancel();
        socket_.close(ignored);
      }
    });
    std::string error = co_await establish(generation);
    if (generation != generation_) {
      co_return;  // closed meanwhile
    }
    connect_timer_.cancel();
    if (timed_out) {
      error = "connect timed out";
    }
    if (!error.empty()) {
      connect_failed(error);
      co_return;
    }
    state_ = state::ready;
    backoff_ = options_.backoff_min;
    counters_->connects.fetch_add(1, std::memory_order_relaxed);
    last_progress_ = steady::now();
    // Send what was queued meanwhile, but not the calls whose callers have given up.
    std::deque<pending> kept;
    for (pending& p : pending_) {
      if (!p.wanted && !p.forget) {
        continue;  // timed out before it could be sent
      }
      out_ += p.unsent;
      p.unsent.clear();
      kept.push_back(std::move(p));
    }
    pending_ = std::move(kept);
    asio::co_spawn(ex_, read_loop(self, generation), log_failure{"Redis reader"});
    schedule_flush();
  }

  // Returns an error message, empty on success.
  asio::awaitable<std::string> establish(std::uint64_t generation) {
    boost::system::error_code ec;
    std::vector<tcp::endpoint> endpoints;
    auto address = asio::ip::make_address(address_.host, ec);
    if (!ec) {
      endpoints.emplace_back(address, address_.port);
    } else {
      auto [rec, results] =
          co_await resolver_.async_resolve(address_.host, std::to_string(address_.port), use_tuple);
      if (rec) {
        co_return "cannot resolve " + address_.host + ": " + rec.message();
      }
      for (const auto& r : results) {
        endpoints.push_back(r.endpoint());
      }
    }
    if (generation != generation_) {
      co_return "closed";
    }
    socket_.close(ec);
    auto [cec, connected_to] = co_await asio::async_connect(socket_, endpoints, use_tuple);
    if (cec) {
      co_return "cannot connect: " + cec.message();
    }
    socket_.set_option(tcp::no_delay(true), ec);
    reader_.reset();

    std::string hello;
    std::size_t expected = 0;
    if (!options_.password.empty()) {
      if (options_.username.empty()) {
        append_command(hello, std::initializer_list<std::string_view>{"AUTH", options_.password});
      } else {
        append_command(hello, std::initializer_list<std::string_view>{"AUTH", options_.username,
                                                                      options_.password});
      }
      ++expected;
    }
    if (options_.db != 0) {
      const std::string db = std::to_string(options_.db);
      append_command(hello, std::initializer_list<std::string_view>{"SELECT", db});
      ++expected;
    }
    if (expected == 0) {
      co_return std::string{};
    }
    auto [wec, written] = co_await asio::async_write(socket_, asio::buffer(hello), use_tuple);
    if (wec) {
      co_return "handshake: " + wec.message();
    }
    while (expected > 0) {
      reply r;
      const auto st = reader_.next(r);
      if (st == reply_reader::status::protocol_error) {
        co_return "handshake: protocol error: " + reader_.error();
      }
      if (st == reply_reader::status::reply) {
        if (r.is_error()) {
          // Never echo the command: it holds the password.
          co_return "handshake refused: " + r.str;
        }
        --expected;
        continue;
      }
      auto [rec, n] = co_await socket_.async_read_some(asio::buffer(read_buffer_), use_tuple);
      if (rec) {
        co_return "handshake: " + rec.message();
      }
      reader_.feed(read_buffer_.data(), n);
    }
    co_return std::string{};
  }

  void connect_failed(const std::string& error) {
    counters_->connect_failures.fetch_add(1, std::memory_order_relaxed);
    // Say it once per outage, not once per attempt.
    if (backoff_ == options_.backoff_min) {
      log_warn("redis " + address_.to_string() + ": " + error);
    }
    boost::system::error_code ignored;
    socket_.close(ignored);
    state_ = state::disconnected;
    next_attempt_ = steady::now() + std::chrono::duration_cast<steady::duration>(backoff_);
    backoff_ = std::min(backoff_ * 2, options_.backoff_max);
    fail_pending(call_status::unavailable);
  }

  // ------------------------------------------------------------------------------------------
  // Reading and writing.

  asio::awaitable<void> read_loop(std::shared_ptr<connection_impl> self, std::uint64_t generation) {
    for (;;) {
      auto [ec, n] = co_await socket_.async_read_some(asio::buffer(read_buffer_), use_tuple);
      if (generation != generation_) {
        co_return;
      }
      if (ec) {
        if (!pending_.empty() || ec != asio::error::eof) {
          log_warn("redis " + address_.to_string() + ": connection lost: " + ec.message());
        }
        drop_connection(call_status::failed);
        co_return;
      }
      reader_.feed(read_buffer_.data(), n);
      last_progress_ = steady::now();
      for (;;) {
        reply r;
        const auto st = reader_.next(r);
        if (st == reply_reader::status::incomplete) {
          break;
        }
        if (st == reply_reader::status::protocol_error || pending_.empty()) {
          log_error("redis " + address_.to_string() + ": " +
                    (pending_.empty() ? std::string("a reply nobody asked for")
                                      : "protocol error: " + reader_.error()) +
                    "; reconnecting");
          drop_connection(call_status::failed);
          co_return;
        }
        deliver(std::move(r));
      }
    }
  }

  void deliver(reply r) {
    pending& front = pending_.front();
    if (front.wanted) {
      front.replies.push_back(std::move(r));
    } else if (!front.forget) {
      counters_->late_replies.fetch_add(1, std::memory_order_relaxed);
    }
    if (--front.expected > 0) {
      return;
    }
    pending done = std::move(front);
    pending_.pop_front();
    if (done.handler) {
      complete(std::move(*done.handler), {call_status::ok, std::move(done.replies)});
    }
  }

  void schedule_flush() {
    if (flush_posted_ || writing_) {
      return;
    }
    flush_posted_ = true;
    asio::post(ex_, [self = shared_from_this()] {
      self->flush_posted_ = false;
      self->flush();
    });
  }

  void flush() {
    if (state_ != state::ready || writing_ || out_.empty()) {
      return;
    }
    writing_ = true;
    counters_->writes.fetch_add(1, std::memory_order_relaxed);
    auto buffer = std::make_shared<std::string>();
    buffer->swap(out_);
    asio::async_write(socket_, asio::buffer(*buffer),
                      [self = shared_from_this(), buffer, generation = generation_](
                          boost::system::error_code ec, std::size_t) {
                        if (generation != self->generation_) {
                          return;
                        }
                        self->writing_ = false;
                        if (ec) {
                          self->drop_connection(call_status::failed);
                          return;
                        }
                        self->flush();
                      });
  }

  // ------------------------------------------------------------------------------------------

  void fail_pending(call_status status) {
    std::deque<pending> failed;
    failed.swap(pending_);
    for (pending& p : failed) {
      if (p.handler) {
        complete(std::move(*p.handler), {status, {}});
      }
    }
  }

  // Closes the socket and fails every call owed a reply; the next call reconnects at once.
  void drop_connection(call_status status) {
    if (state_ == state::ready && !pending_.empty()) {
      counters_->broken.fetch_add(1, std::memory_order_relaxed);
    }
    ++generation_;
    boost::system::error_code ignored;
    resolver_.cancel();
    connect_timer_.cancel();
    socket_.close(ignored);
    reader_.reset();
    out_.clear();
    writing_ = false;
    flush_posted_ = false;
    if (state_ != state::closed) {
      state_ = state::disconnected;
    }
    fail_pending(status);
  }

  asio::any_io_executor ex_;
  node_address address_;
  connection_options options_;
  std::shared_ptr<connection_counters> counters_;
  tcp::socket socket_;
  tcp::resolver resolver_;
  asio::steady_timer deadline_timer_;
  asio::steady_timer connect_timer_;
  time_point timer_at_ = time_point::max();

  state state_ = state::disconnected;
  std::uint64_t generation_ = 0;
  time_point next_attempt_{};
  nanos backoff_;
  time_point last_progress_{};

  std::deque<pending> pending_;
  std::string out_;
  bool writing_ = false;
  bool flush_posted_ = false;
  reply_reader reader_;
  std::vector<char> read_buffer_;
};

}  // namespace

std::shared_ptr<connection> connection::create(asio::any_io_executor ex, node_address where,
                                               connection_options options,
                                               std::shared_ptr<connection_counters> counters) {
  return std::make_shared<connection_impl>(std::move(ex), std::move(where), std::move(options),
                                           std::move(counters));
}

}  // namespace ratewall::redis
