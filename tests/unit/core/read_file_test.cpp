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

TEST_CASE("obstacle_to_writing: what a file the gateway writes would find at its path") {
  temp_dir dir;
  const auto what = [](const std::string& path) {
    return obstacle_to_writing(path, true, ".tmp").what;
  };
  CHECK(what(dir.path + "/new.bin") == write_obstacle::none);
  CHECK(what(dir.write("old.bin", "x")) == write_obstacle::none);
  CHECK(what(dir.path) == write_obstacle::directory);
  CHECK(what(dir.path + "/no-such-folder/f") == write_obstacle::no_folder);
  // A file where a folder of the path should be.
  CHECK(what(dir.path + "/old.bin/f") == write_obstacle::no_folder);
  const std::string fifo = dir.path + "/fifo";
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  CHECK(what(fifo) == write_obstacle::not_regular);
  const write_obstacle too_long =
      obstacle_to_writing(dir.path + "/" + std::string(300, 'k'), true, "");
  CHECK(too_long.what == write_obstacle::unreadable);
  CHECK(too_long.error == "File name too long");
  // A name the file system takes, but not with the suffix of the file written beside it.
  const std::string at_limit = dir.path + "/" + std::string(250, 'n');
  CHECK(obstacle_to_writing(at_limit, true, "").what == write_obstacle::none);
  CHECK(obstacle_to_writing(at_limit, true, ".4194304.tmp").what == write_obstacle::name_too_long);
}

TEST_CASE("obstacle_to_writing follows links, dangling ones too, to the file they name") {
  temp_dir dir;
  REQUIRE(std::filesystem::create_directory(dir.path + "/real"));
  std::filesystem::create_symlink(dir.path + "/real/future.bin", dir.path + "/dangling");
  const write_obstacle dangling = obstacle_to_writing(dir.path + "/dangling", true, ".tmp");
  CHECK(dangling.what == write_obstacle::none);
  CHECK(dangling.path == dir.path + "/real/future.bin");
  CHECK(link_target(dir.path + "/dangling") == dir.path + "/real/future.bin");
  // Relative to the link's own folder, through two links.
  std::filesystem::create_symlink("dangling", dir.path + "/second");
  CHECK(link_target(dir.path + "/second") == dir.path + "/real/future.bin");
  std::filesystem::create_symlink(dir.path + "/gone/x.bin", dir.path + "/into-nothing");
  CHECK(obstacle_to_writing(dir.path + "/into-nothing", true, ".tmp").what ==
        write_obstacle::no_folder);
  CHECK(link_target(dir.path + "/plain.bin") == dir.path + "/plain.bin");
}
