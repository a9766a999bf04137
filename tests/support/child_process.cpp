#include "support/child_process.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <thread>

namespace ratewall::testing {

child_process::child_process(std::vector<std::string> argv, std::vector<std::string> extra_env) {
  static int counter = 0;
  output_path_ =
      "/tmp/ratewall-test-" + std::to_string(::getpid()) + "-" + std::to_string(++counter) + ".log";
  pid_ = ::fork();
  if (pid_ < 0) {
    throw std::runtime_error("fork failed");
  }
  if (pid_ == 0) {
    // As systemd starts a service: every signal at its default, none blocked, whatever this
    // process (or whoever started the tests) ignores or blocks.
    sigset_t none;
    ::sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    for (int sig = 1; sig < NSIG; ++sig) {
      ::signal(sig, SIG_DFL);  // SIGKILL and SIGSTOP, and numbers that are no signal, refuse
    }
    int fd = ::open(output_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
      ::dup2(fd, STDOUT_FILENO);
      ::dup2(fd, STDERR_FILENO);
      ::close(fd);
    }
    for (auto& e : extra_env) {
      ::putenv(e.data());
    }
    std::vector<char*> args;
    for (auto& a : argv) {
      args.push_back(a.data());
    }
    args.push_back(nullptr);
    ::execvp(args[0], args.data());
    ::_exit(127);
  }
}

child_process::~child_process() {
  if (running()) {
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
  }
  ::unlink(output_path_.c_str());
}

std::string child_process::output() const {
  std::ifstream in(output_path_);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

bool child_process::wait_for_output(const std::string& text,
                                    std::chrono::milliseconds timeout) const {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (output().find(text) != std::string::npos) {
      return true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

void child_process::signal(int sig) const {
  if (pid_ > 0) {
    ::kill(pid_, sig);
  }
}

bool child_process::running() {
  if (pid_ <= 0 || exit_code_ != -1) {
    return false;
  }
  int status = 0;
  pid_t r = ::waitpid(pid_, &status, WNOHANG);
  if (r == pid_) {
    exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    return false;
  }
  return r == 0;
}

int child_process::wait_exit(std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (running()) {
    if (std::chrono::steady_clock::now() >= deadline) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
      exit_code_ = -1;
      pid_ = -1;
      return -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return exit_code_;
}

std::uint16_t listening_port(const std::string& output) {
  auto at = output.find("listening on ");
  if (at == std::string::npos) {
    return 0;
  }
  auto colon = output.find(' ', at + 13);
  auto line = output.substr(at + 13, colon - at - 13);
  auto port_at = line.rfind(':');
  return static_cast<std::uint16_t>(std::atoi(line.c_str() + port_at + 1));
}

std::uint16_t admin_port_of(const std::string& output) {
  auto at = output.find("admin on ");
  if (at == std::string::npos) {
    return 0;
  }
  auto end = output.find(',', at);
  auto colon = output.rfind(':', end);
  return static_cast<std::uint16_t>(std::atoi(output.c_str() + colon + 1));
}

}  // namespace ratewall::testing
