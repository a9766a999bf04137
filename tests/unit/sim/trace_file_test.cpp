// How `ratewall simulate` reads a trace file: mapped when regular, read whole from a pipe,
// and a clear error for anything it cannot read.

#include "ratewall/sim/trace_file.hpp"

#include <doctest/doctest.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>
#include <thread>

#include "ratewall/sim/trace.hpp"
#include "support/temp_dir.hpp"

using namespace ratewall;
using ratewall::testing::temp_dir;

TEST_CASE("trace file: a regular file is read whole, byte for byte") {
  temp_dir dir;
  std::string text = "time_s,method,path,api_key,user,ip\n";
  for (int i = 0; i < 5000; ++i) {
    text += std::to_string(i) + ",GET,/a/" + std::to_string(i) + ",,,192.0.2.1\n";
  }
  text += std::string("0,GET,/\0x,,,192.0.2.1", 21);  // no final newline, a NUL inside
  const trace_file file(dir.write("t.csv", text));
  CHECK(file.text() == text);
}

TEST_CASE("trace file: an empty file is an empty trace") {
  temp_dir dir;
  CHECK(trace_file(dir.write("empty.csv", "")).text().empty());
}

TEST_CASE("trace file: a byte order mark is left out, and only a whole one") {
  temp_dir dir;
  CHECK(trace_file(dir.write("bom.csv",
                             "\xEF\xBB\xBF"
                             "0,GET,/,,,192.0.2.1\n"))
            .text() == "0,GET,/,,,192.0.2.1\n");
  CHECK(trace_file(dir.write("half.csv",
                             "\xEF\xBB"
                             "0"))
            .text() ==
        "\xEF\xBB"
        "0");
}

TEST_CASE(
    "trace file: a pipe is read to its end (zcat log.gz | ratewall simulate --trace /dev/stdin)") {
  temp_dir dir;
  const std::string fifo = dir.path + "/fifo";
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  // More than a pipe holds, so the reader must loop while the writer blocks.
  std::string text;
  for (int i = 0; i < 20000; ++i) {
    text += std::to_string(i) + ",GET,/,,,192.0.2.1\n";
  }
  std::thread writer([&] {
    int fd = ::open(fifo.c_str(), O_WRONLY);
    std::size_t sent = 0;
    while (fd >= 0 && sent < text.size()) {
      ssize_t n = ::write(fd, text.data() + sent, text.size() - sent);
      if (n <= 0) {
        break;
      }
      sent += static_cast<std::size_t>(n);
    }
    ::close(fd);
  });
  const trace_file file(fifo);
  writer.join();
  CHECK(file.text() == text);
}

TEST_CASE("trace file: what cannot be read is an error naming the file and why") {
  temp_dir dir;
  CHECK_THROWS_WITH_AS(
      trace_file(dir.path + "/missing.csv"),
      (dir.path + "/missing.csv: cannot read file: No such file or directory").c_str(),
      trace_error);
  CHECK_THROWS_WITH_AS(trace_file{dir.path}, (dir.path + ": is a directory, not a trace").c_str(),
                       trace_error);
  CHECK_THROWS_WITH_AS(trace_file{"/dev/zero"}, "/dev/zero: is not a file, a pipe or a terminal",
                       trace_error);
  if (::geteuid() != 0) {  // root reads a file whatever its mode
    const std::string locked = dir.write("locked.csv", "0,GET,/,,,192.0.2.1\n");
    ::chmod(locked.c_str(), 0);
    CHECK_THROWS_WITH_AS(trace_file{locked},
                         (locked + ": cannot read file: Permission denied").c_str(), trace_error);
  }
}

TEST_CASE("trace file: a file truncated while mapped ends the run with a message, not SIGBUS") {
  temp_dir dir;
  const std::string path = dir.write("rotated.log", std::string(1 << 20, 'x'));
  int out[2];
  REQUIRE(::pipe(out) == 0);
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    ::dup2(out[1], STDERR_FILENO);
    const trace_file file(path);
    // logrotate's copytruncate, while the replay reads the end of the file.
    if (::truncate(path.c_str(), 0) != 0) {
      ::_exit(3);
    }
    volatile char last = file.text().back();
    (void)last;
    ::_exit(0);
  }
  ::close(out[1]);
  std::string said;
  char buffer[1024];
  for (ssize_t n; (n = ::read(out[0], buffer, sizeof buffer)) > 0;) {
    said.append(buffer, static_cast<std::size_t>(n));
  }
  ::close(out[0]);
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 2);
  CHECK(said == path +
                    ": the file was truncated while it was read (a log rotated?): run again "
                    "on a copy\n");
}

TEST_CASE("trace file: a bus error elsewhere is left to the action there was before") {
  temp_dir dir;
  const std::string path = dir.write("t.csv", "0,GET,/,,,192.0.2.1\n");
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    ::signal(SIGBUS, SIG_DFL);  // doctest's crash report is not what is tested
    const trace_file file(path);
    ::raise(SIGBUS);  // not a fault inside the mapping: the default action, death by SIGBUS
    ::_exit(0);
  }
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  REQUIRE(WIFSIGNALED(status));
  CHECK(WTERMSIG(status) == SIGBUS);
}
