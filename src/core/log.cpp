#include "ratewall/core/log.hpp"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <ctime>
#include <string>

namespace ratewall {

namespace {
std::atomic<log_level> g_level{log_level::info};
}  // namespace

std::string_view to_string(log_level l) {
  switch (l) {
    case log_level::debug:
      return "debug";
    case log_level::info:
      return "info";
    case log_level::warn:
      return "warn";
    case log_level::error:
      return "error";
    case log_level::off:
      break;
  }
  return "off";
}

void set_log_level(log_level level) {
  g_level.store(level, std::memory_order_relaxed);
}
log_level current_log_level() {
  return g_level.load(std::memory_order_relaxed);
}

void log_line(log_level level, std::string_view message) {
  if (level < current_log_level()) {
    return;
  }
  auto now = std::chrono::system_clock::now();
  std::time_t t = std::chrono::system_clock::to_time_t(now);
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()) % 1000;
  std::tm tm{};
  gmtime_r(&t, &tm);
  char stamp[40];
  std::size_t n = std::strftime(stamp, sizeof stamp, "%Y-%m-%dT%H:%M:%S", &tm);
  std::string line(stamp, n);
  char frac[8];
  std::snprintf(frac, sizeof frac, ".%03dZ ", static_cast<int>(ms.count()));
  line += frac;
  line += to_string(level);
  line += ' ';
  line += message;
  line += '\n';
  // One write per line so lines from several threads never interleave.
  ssize_t ignored = ::write(STDERR_FILENO, line.data(), line.size());
  (void)ignored;
}

void log_exception(std::string_view context, std::exception_ptr e, std::string_view then) {
  if (!e) {
    return;
  }
  std::string message(context);
  message += " ended by an exception: ";
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& x) {
    message += x.what();
  } catch (...) {
    message += "(not a std::exception)";
  }
  if (!then.empty()) {
    message += "; ";
    message += then;
  }
  log_error(message);
}

}  // namespace ratewall
