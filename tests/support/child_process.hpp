#pragma once

// A program the test starts itself (ratewall, redis-server), with its output in a file, ended
// by its PID when the test is done with it.

#include <sys/types.h>
#include <chrono>
#include <string>
#include <vector>

namespace ratewall::testing {

class child_process {
 public:
  /// Starts `argv[0]` with `argv`; stdout and stderr go to a temporary file.
  explicit child_process(std::vector<std::string> argv, std::vector<std::string> extra_env = {});
  ~child_process();
  child_process(const child_process&) = delete;
  child_process& operator=(const child_process&) = delete;

  pid_t pid() const { return pid_; }
  /// Everything the program has printed so far.
  std::string output() const;
  /// Waits until the output contains `text`; false after `timeout`.
  bool wait_for_output(const std::string& text, std::chrono::milliseconds timeout) const;
  void signal(int sig) const;
  /// Waits for the exit; the exit code, or -1 after `timeout` (the process is then killed).
  int wait_exit(std::chrono::milliseconds timeout);
  bool running();

 private:
  pid_t pid_ = -1;
  std::string output_path_;
  int exit_code_ = -1;
};

/// The port in a ratewall "listening on HOST:PORT" log line, 0 when not there yet.
std::uint16_t listening_port(const std::string& output);
/// The port in a ratewall "admin on HOST:PORT," log line, 0 when not there.
std::uint16_t admin_port_of(const std::string& output);

}  // namespace ratewall::testing
