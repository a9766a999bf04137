#pragma once

// The transport (DESIGN §1): one stream type for both legs of the proxy, a TCP socket read and
// written plainly or through TLS. The session, the exchange and the tunnel are written once
// against it; which of the two a connection is was decided when it was made.

#include <openssl/ssl.h>

#include <boost/asio/async_result.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/buffer.hpp>
#include <boost/asio/compose.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/asio/ssl/stream_base.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>
#include <memory>
#include <span>
#include <string>

namespace ratewall {

/// What a look at a connection's incoming side found (transport::look_for_end).
enum class peer_end {
  open,     // not closed: what the peer sent is kept for the next read
  closed,   // its FIN, its close_notify, or a broken connection
  unknown,  // no room was left for what it sent, so the look could not see past it
};

namespace detail {

/// One read of what the socket holds, without waiting: the bytes, and what came after them:
/// possibly more (the space was filled), nothing for now, the end of the stream, a failure.
/// With no space, a look (MSG_PEEK) that takes nothing: `more` when bytes wait.
struct taken_now {
  enum outcome { more, drained, end, failed };
  std::size_t bytes = 0;
  outcome after = more;
};
taken_now take_now(boost::asio::ip::tcp::socket& socket, boost::asio::mutable_buffer into);

/// One send of what the socket takes now, without waiting: the bytes sent, fewer than given (0
/// too) when its buffer is full. `ec` is set when the connection has failed.
std::size_t send_now(boost::asio::ip::tcp::socket& socket,
                     std::span<const boost::asio::const_buffer> pieces,
                     boost::system::error_code& ec);

/// Where a TLS write gathers its buffers into one record: the thread's own, as SSL_write has
/// encrypted it (into the channel's pending records) before the write's initiation returns.
char* gather_space();

}  // namespace detail

/// TLS on a socket: OpenSSL reads records from, and writes them into, buffers of this object
/// through a BIO of its own, and the socket is read and written with Asio's plain operations.
///
/// This is what Asio's ssl::stream does, with less in between (the numbers are callgrind's, per
/// kept-alive HTTP/1.1 request): its engine goes through a BIO pair, so every byte is copied
/// once more each way and each call asks the pair for its state (about 1.5k instructions), and
/// it clears OpenSSL's error queue before every call (about 2.5k), where clearing it when it
/// holds something is enough. OpenSSL on the descriptor itself, as nginx does, is no better
/// under Asio: waiting for readiness re-arms the descriptor with `epoll_ctl` on every wait.
///
/// One read and one write may be in progress at once (the HTTP/2 connection and the tunnel run
/// both), and both may have records to send: a read, what OpenSSL answers while reading (a
/// KeyUpdate's answer, a refused renegotiation's alert). One socket write runs at a time; an
/// operation that finds one running waits for it, and a read sends what it made before it reads
/// on, so a peer that sends and never reads is held back by TCP, not by our memory.
class tls_channel {
 public:
  enum class role { server, client };

  /// `context` must outlive the channel.
  tls_channel(boost::asio::ip::tcp::socket socket, boost::asio::ssl::context& context);
  ~tls_channel();
  tls_channel(const tls_channel&) = delete;
  tls_channel& operator=(const tls_channel&) = delete;

  boost::asio::ip::tcp::socket& socket() { return socket_; }
  SSL* ssl() const { return ssl_; }
  bool holds_unread_input() const { return SSL_has_pending(ssl_) == 1 || in_begin_ < in_end_; }

  boost::asio::awaitable<boost::system::error_code> handshake(role r);
  boost::asio::awaitable<void> shutdown_send();
  /// Reads what the socket holds into the input, without waiting (transport::look_for_end).
  detail::taken_now take_records();

  /// What one call into OpenSSL came to: bytes, a wish for more input, or an error.
  struct step {
    std::size_t bytes = 0;
    bool want_input = false;
    boost::system::error_code ec;
  };
  step read(void* data, std::size_t size);
  step write(const void* data, std::size_t size);
  /// Where the socket's next bytes go, and how many came (0 and `ec` at the end or a failure;
  /// the end of the stream without the peer's close_notify is `stream_truncated`).
  boost::asio::mutable_buffer input_space();
  boost::system::error_code received(const boost::system::error_code& ec, std::size_t n);
  /// Sending: records are waiting (`has_output`), another operation is writing them (`writing`:
  /// wait with `async_wait_writer`), or a write failed (`write_error`, for good: the stream is
  /// cut mid-record). `begin_write` hands the waiting records to the socket, in one write;
  /// `end_write` takes its outcome.
  bool has_output() const { return !pending_.empty(); }
  bool writing() const { return writing_; }
  const boost::system::error_code& write_error() const { return write_error_; }
  boost::asio::const_buffer begin_write();
  void end_write(const boost::system::error_code& ec);
  template <class Token>
  auto async_wait_writer(Token&& token) {
    return writer_done_.async_wait(std::forward<Token>(token));
  }

  /// One TLS record of plain text at most per write: what a write takes is then bounded.
  static constexpr std::size_t k_record = 16 * 1024;

 private:
  friend struct tls_bio;
  boost::asio::ip::tcp::socket socket_;
  SSL* ssl_ = nullptr;
  std::unique_ptr<char[]> in_;  // records read from the socket, not yet taken by OpenSSL
  std::size_t in_begin_ = 0;
  std::size_t in_end_ = 0;
  std::string pending_;  // records OpenSSL wrote, not yet handed to the socket
  std::string sending_;  // records being written to the socket
  bool writing_ = false;
  boost::system::error_code write_error_;
  boost::asio::steady_timer writer_done_;  // never expires: cancelled when a write ends
};

namespace detail {

/// A read: SSL_read and, while it wants input, a read of the socket. What OpenSSL wrote while
/// reading is sent before anything else happens.
template <class MutableBuffer>
struct tls_read_op {
  tls_channel& t;
  MutableBuffer buffer;
  tls_channel::step result{};
  bool writing = false;  // the socket operation under way is our write, not a read
  bool started = false;

  template <class Self>
  void operator()(Self& self) {  // the start; posted, the answer
    if (started) {
      self.complete(result.ec, result.bytes);
      return;
    }
    started = true;
    result = t.read(buffer.data(), buffer.size());
    go_on(self, true);
  }
  template <class Self>
  void operator()(Self& self, boost::system::error_code ec, std::size_t n) {
    if (writing) {
      writing = false;
      t.end_write(ec);
    } else if (const boost::system::error_code rec = t.received(ec, n)) {
      result = {0, false, rec};
    } else {
      result = t.read(buffer.data(), buffer.size());
    }
    go_on(self, false);
  }
  template <class Self>
  void operator()(Self& self, boost::system::error_code) {  // the other writer is done
    if (self.cancelled() != boost::asio::cancellation_type::none) {
      self.complete(boost::asio::error::operation_aborted, 0);
      return;
    }
    go_on(self, false);
  }

 private:
  /// What OpenSSL wrote goes out first; then the answer, or more input. An answer found
  /// without waiting is posted, not given inside the initiating call.
  template <class Self>
  void go_on(Self& self, bool initiating) {
    if (t.has_output()) {
      if (!t.write_error()) {
        if (t.writing()) {
          t.async_wait_writer(std::move(self));
        } else {
          writing = true;
          boost::asio::async_write(t.socket(), t.begin_write(), std::move(self));
        }
        return;
      }
      result = {0, false, t.write_error()};  // what we owe the peer cannot reach it
    } else if (result.want_input) {
      t.socket().async_read_some(t.input_space(), std::move(self));
      return;
    }
    if (initiating) {
      boost::asio::post(std::move(self));
    } else {
      self.complete(result.ec, result.bytes);
    }
  }
};

/// A write: one SSL_write of at most a record, then the records waiting, sent in one write
/// once no other operation is writing.
struct tls_write_op {
  tls_channel& t;
  const void* data;
  std::size_t size;
  std::size_t written = 0;
  boost::system::error_code error;  // found at once: posted, then given

  template <class Self>
  void operator()(Self& self) {
    if (error) {  // the posted answer
      self.complete(error, 0);
      return;
    }
    if (t.write_error()) {
      error = t.write_error();
    } else {
      const tls_channel::step s = t.write(data, size);
      error = s.ec;
      written = s.bytes;
    }
    if (error) {
      boost::asio::post(std::move(self));
      return;
    }
    send(self);
  }
  template <class Self>
  void operator()(Self& self, boost::system::error_code) {  // the other writer is done
    if (self.cancelled() != boost::asio::cancellation_type::none) {
      self.complete(boost::asio::error::operation_aborted, 0);
      return;
    }
    send(self);
  }
  template <class Self>
  void operator()(Self& self, boost::system::error_code ec, std::size_t) {
    t.end_write(ec);
    self.complete(ec, ec ? 0 : written);
  }

 private:
  template <class Self>
  void send(Self& self) {
    if (t.write_error()) {
      self.complete(t.write_error(), 0);
    } else if (t.writing()) {  // a read sending what it made: ours go out after it
      t.async_wait_writer(std::move(self));
    } else {
      boost::asio::async_write(t.socket(), t.begin_write(), std::move(self));
    }
  }
};

}  // namespace detail

class transport {
 public:
  using executor_type = boost::asio::ip::tcp::socket::executor_type;
  using handshake_type = boost::asio::ssl::stream_base::handshake_type;

  /// A plain connection.
  explicit transport(boost::asio::ip::tcp::socket socket) : plain_(std::move(socket)) {}
  /// A TLS connection on `socket`, made with `context`, which must outlive it (its handshake is
  /// still to be done).
  transport(boost::asio::ip::tcp::socket socket, boost::asio::ssl::context& context)
      : plain_(socket.get_executor()),
        tls_(std::make_unique<tls_channel>(std::move(socket), context)) {}

  executor_type get_executor() { return socket().get_executor(); }

  /// The TCP layer: what cancels, waits for readability, shuts down and closes.
  boost::asio::ip::tcp::socket& socket() { return tls_ ? tls_->socket() : plain_; }
  const boost::asio::ip::tcp::socket& socket() const { return tls_ ? tls_->socket() : plain_; }

  bool secure() const { return tls_ != nullptr; }
  /// The protocol ALPN chose in the handshake ("h2", "http/1.1"), or "" (plain, or none).
  std::string_view alpn() {
    if (!tls_) {
      return {};
    }
    const unsigned char* name = nullptr;
    unsigned int length = 0;
    SSL_get0_alpn_selected(tls_->ssl(), &name, &length);
    return std::string_view(reinterpret_cast<const char*>(name), length);
  }
  /// The TLS connection's OpenSSL handle (SNI, verification, ALPN); null when plain.
  SSL* ssl() { return tls_ ? tls_->ssl() : nullptr; }

  /// True when bytes have been received that no read has taken yet and that the socket no longer
  /// shows: TLS records held by OpenSSL or read from the socket for it (a reader's own buffer is
  /// the caller's to check). A plain connection keeps nothing of its own.
  bool holds_unread_input() { return tls_ && tls_->holds_unread_input(); }
  /// True while a TLS operation has the socket writing records (a read may write what OpenSSL
  /// made while reading): cancelling the socket then would cut a record.
  bool writing_records() const { return tls_ && tls_->writing(); }

  /// The TLS handshake, as a server or as a client; a plain connection has none to do.
  boost::asio::awaitable<boost::system::error_code> handshake(handshake_type type);

  /// AsyncReadStream. Through TLS, into the first buffer of the sequence.
  template <class MutableBuffers, class Token>
  auto async_read_some(const MutableBuffers& buffers, Token&& token) {
    return boost::asio::async_initiate<Token, void(boost::system::error_code, std::size_t)>(
        [this](auto handler, const MutableBuffers& b) {
          if (!tls_) {
            plain_.async_read_some(b, std::move(handler));
            return;
          }
          boost::asio::async_compose<decltype(handler),
                                     void(boost::system::error_code, std::size_t)>(
              detail::tls_read_op<boost::asio::mutable_buffer>{
                  *tls_, *boost::asio::buffer_sequence_begin(b)},
              handler, tls_->socket());
        },
        token, buffers);
  }

  /// AsyncWriteStream. Through TLS, several buffers are first gathered into one, so that a
  /// write is one record (and one system call), not one per piece of a chunk.
  template <class ConstBuffers, class Token>
  auto async_write_some(const ConstBuffers& buffers, Token&& token) {
    return boost::asio::async_initiate<Token, void(boost::system::error_code, std::size_t)>(
        [this](auto handler, const ConstBuffers& b) {
          if (!tls_) {
            plain_.async_write_some(b, std::move(handler));
            return;
          }
          const boost::asio::const_buffer first = *boost::asio::buffer_sequence_begin(b);
          detail::tls_write_op op{
              *tls_, first.data(), std::min(first.size(), tls_channel::k_record), 0, {}};
          if (op.size < tls_channel::k_record && op.size != boost::asio::buffer_size(b)) {
            char* gathered = detail::gather_space();
            op.data = gathered;
            op.size =
                boost::asio::buffer_copy(boost::asio::buffer(gathered, tls_channel::k_record), b);
          }
          boost::asio::async_compose<decltype(handler),
                                     void(boost::system::error_code, std::size_t)>(
              std::move(op), handler, tls_->socket());
        },
        token, buffers);
  }

  /// Sends at once what the socket takes, without waiting: the bytes sent (see
  /// detail::send_now). Through TLS nothing is sent here (0): its records go out through write
  /// operations, which keep them in order with what a read sends.
  std::size_t send_now(std::span<const boost::asio::const_buffer> pieces,
                       boost::system::error_code& ec) {
    return tls_ ? 0 : detail::send_now(plain_, pieces, ec);
  }

  /// Whether the peer has closed its side, found without waiting and without losing what it
  /// sent: what came is read into `ahead` (the caller's read buffer, up to `limit` bytes in
  /// it), where the next read finds it; through TLS its records are read and their text goes
  /// there, so a close_notify after text is seen too. Only with nothing left unread (`open`,
  /// `closed`) is a wait for more on the socket not woken at once.
  template <class DynamicBuffer>
  peer_end look_for_end(DynamicBuffer& ahead, std::size_t limit) {
    return tls_ ? look_for_tls_end(ahead, limit) : look_for_plain_end(ahead, limit);
  }

  /// Stops sending: TLS's close_notify (the peer's is not waited for), then the TCP half close.
  /// Reading goes on: what the peer still sends is read as before. The caller bounds the write.
  boost::asio::awaitable<void> shutdown_send();
  /// TLS's close_notify alone (nothing on a plain connection): for a connection that closes
  /// next, whose close() sends the FIN. The caller bounds the write.
  boost::asio::awaitable<void> close_notify();

  /// Closes the connection at once.
  void close() {
    boost::system::error_code ignored;
    socket().close(ignored);
  }

 private:
  /// What look_for_end may still read into `ahead`: up to `limit` in it, 4 KiB at a time.
  template <class DynamicBuffer>
  static std::size_t room_in(const DynamicBuffer& ahead, std::size_t limit) {
    return ahead.size() < limit ? std::min<std::size_t>(limit - ahead.size(), 4096) : 0;
  }

  template <class DynamicBuffer>
  peer_end look_for_plain_end(DynamicBuffer& ahead, std::size_t limit) {
    using taken_now = detail::taken_now;
    for (;;) {
      const std::size_t room = room_in(ahead, limit);
      const taken_now taken = detail::take_now(plain_, ahead.prepare(room));
      ahead.commit(taken.bytes);
      if (taken.after != taken_now::more) {
        return taken.after == taken_now::drained ? peer_end::open : peer_end::closed;
      }
      if (room == 0) {
        return peer_end::unknown;  // bytes wait, and there is no room to read past them
      }
    }
  }

  template <class DynamicBuffer>
  peer_end look_for_tls_end(DynamicBuffer& ahead, std::size_t limit) {
    using taken_now = detail::taken_now;
    bool ended = false;  // the socket ended; the records before its end are read first
    for (;;) {
      const std::size_t room = room_in(ahead, limit);
      if (room == 0) {
        return ended ? peer_end::closed : peer_end::unknown;
      }
      const auto space = ahead.prepare(room);
      const tls_channel::step text = tls_->read(space.data(), space.size());
      ahead.commit(text.bytes);
      if (text.ec) {
        return peer_end::closed;  // close_notify, or a broken stream
      }
      if (!text.want_input) {
        continue;  // OpenSSL may hold more text: read on
      }
      if (ended) {
        return peer_end::closed;
      }
      const taken_now taken = tls_->take_records();
      if (taken.after == taken_now::failed) {
        return peer_end::closed;
      }
      ended = taken.after == taken_now::end;
      if (taken.bytes == 0 && !ended) {
        return peer_end::open;  // drained: a record may have begun, not ended
      }
    }
  }

  boost::asio::ip::tcp::socket plain_;  // the socket of a plain connection; unused with TLS
  std::unique_ptr<tls_channel> tls_;
};

}  // namespace ratewall
