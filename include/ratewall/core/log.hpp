#pragma once

#include <exception>
#include <string_view>

namespace ratewall {

enum class log_level { debug, info, warn, error, off };

/// "debug", "info", "warn", "error", "off": as written in the config and in each log line.
std::string_view to_string(log_level l);

/// The error log: one line per event on stderr, `<time> <level> <message>`. Thread-safe
/// (one write(2) per line). Messages never contain raw API keys: callers log hashed subjects.
void set_log_level(log_level level);
log_level current_log_level();
void log_line(log_level level, std::string_view message);

inline void log_error(std::string_view m) {
  log_line(log_level::error, m);
}
inline void log_warn(std::string_view m) {
  log_line(log_level::warn, m);
}
inline void log_info(std::string_view m) {
  log_line(log_level::info, m);
}

/// Logs, at error level, "<context> ended by an exception: <what()>", then "; <then>" when
/// given; nothing when `e` is null.
void log_exception(std::string_view context, std::exception_ptr e, std::string_view then = {});

/// co_spawn's completion for the gateway's own coroutines (a connection, an HTTP/2 stream):
/// co_spawn catches what a coroutine throws and hands it to the completion, and asio::detached
/// drops it unseen, so a connection or a stream would end (its locals unwound, its sockets
/// closed) with nothing in the log. This logs it.
struct log_failure {
  std::string_view context;  // a literal: "connection", "HTTP/2 stream"
  void operator()(std::exception_ptr e) const { log_exception(context, e); }
};

}  // namespace ratewall
