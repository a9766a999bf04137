// How `ratewall simulate` reads a trace file: whole, before the replay (what the file holds
// after is not the trace), from a file, a pipe or the standard input, and a clear error for
// anything it cannot read.

#include "ratewall/sim/trace_file.hpp"

#include <doctest/doctest.h>
#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
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
  CHECK(trace_file("/dev/null").text().empty());
  if (::geteuid() != 0) {  // root reads a file whatever its mode
    const std::string locked = dir.write("locked.csv", "0,GET,/,,,192.0.2.1\n");
    ::chmod(locked.c_str(), 0);
    CHECK_THROWS_WITH_AS(trace_file{locked},
                         (locked + ": cannot read file: Permission denied").c_str(), trace_error);
  }
}

TEST_CASE("trace file: what the file held when read is the trace, whatever is written after") {
  temp_dir dir;
  const std::string before = "0,GET,/a,,,192.0.2.1\n";
  const std::string path = dir.write("rotated.csv", before);
  const trace_file file(path);
  // logrotate's copytruncate, then the writer goes on; or the file rewritten in place.
  REQUIRE(::truncate(path.c_str(), 0) == 0);
  dir.write("rotated.csv", "9,PUT,/b,,,192.0.2.9\n");
  CHECK(file.text() == before);
}

TEST_CASE("trace file: \"-\" and /dev/stdin read the standard input, a socket included") {
  int pair[2];
  REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM, 0, pair) == 0);
  const std::string text = "0,GET,/,,,192.0.2.1\n";
  REQUIRE(::write(pair[1], text.data(), text.size()) == static_cast<ssize_t>(text.size()));
  ::close(pair[1]);
  const int saved = ::dup(STDIN_FILENO);
  REQUIRE(::dup2(pair[0], STDIN_FILENO) == STDIN_FILENO);
  ::close(pair[0]);
  std::string read_text;
  std::string error;
  try {
    read_text = std::string(trace_file("/dev/stdin").text());  // open() gives ENXIO for a socket
  } catch (const trace_error& e) {
    error = e.what();
  }
  ::dup2(saved, STDIN_FILENO);
  ::close(saved);
  CHECK(error == "");
  CHECK(read_text == text);

  int pipe_ends[2];
  REQUIRE(::pipe(pipe_ends) == 0);
  REQUIRE(::write(pipe_ends[1], text.data(), text.size()) == static_cast<ssize_t>(text.size()));
  ::close(pipe_ends[1]);
  const int saved_again = ::dup(STDIN_FILENO);
  REQUIRE(::dup2(pipe_ends[0], STDIN_FILENO) == STDIN_FILENO);
  ::close(pipe_ends[0]);
  read_text = std::string(trace_file("-").text());
  ::dup2(saved_again, STDIN_FILENO);
  ::close(saved_again);
  CHECK(read_text == text);
}
