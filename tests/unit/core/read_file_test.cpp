#include "ratewall/core/read_file.hpp"

#include <doctest/doctest.h>
#include <sys/stat.h>

#include <string>

#include "support/temp_dir.hpp"

using namespace ratewall;
using ratewall::testing::temp_dir;

TEST_CASE("read_regular_file: a regular file's bytes, up to one past the limit") {
  temp_dir dir;
  const std::string path = dir.write("f.txt", "hello");
  CHECK(read_regular_file(path, 100).text == "hello");
  CHECK(read_regular_file(path, 5).text == "hello");
  const file_text over = read_regular_file(path, 3);
  CHECK(over.error.empty());
  CHECK(over.text == "hell");  // limit + 1: the caller sees it is larger
  CHECK(read_regular_file(dir.write("empty", ""), 10).text.empty());
}

TEST_CASE("read_regular_file: what is not a regular file is refused at once, not waited on") {
  temp_dir dir;
  CHECK(read_regular_file(dir.path + "/missing", 10).error == "No such file or directory");
  CHECK(read_regular_file(dir.path, 10).error == "Is a directory");
  // A FIFO with no writer: opening it for reading would block until one came.
  const std::string fifo = dir.path + "/fifo";
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  const file_text from_fifo = read_regular_file(fifo, 10);
  CHECK(from_fifo.text.empty());
  CHECK(from_fifo.error.find("not a regular file") != std::string::npos);
  // A device that never ends.
  CHECK(read_regular_file("/dev/zero", 10).error.find("not a regular file") != std::string::npos);
}
