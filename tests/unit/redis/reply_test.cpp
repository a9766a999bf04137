#include <doctest/doctest.h>

#include <hiredis/hiredis.h>

#include <random>
#include <string>
#include <vector>

#include "ratewall/redis/reply.hpp"

using namespace ratewall::redis;

namespace {

reply parse_one(const std::string& bytes) {
  reply_reader reader;
  reader.feed(bytes.data(), bytes.size());
  reply r;
  REQUIRE(reader.next(r) == reply_reader::status::reply);
  return r;
}

}  // namespace

TEST_CASE("commands are formatted as RESP arrays of bulk strings") {
  CHECK(format_command({"SET", "k", "v"}) == "*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\nv\r\n");
  SUBCASE("binary-safe: empty arguments, CR LF and NUL inside") {
    const std::string odd("a\r\n\0b", 5);
    CHECK(format_command({"ECHO", "", odd}) ==
          std::string("*3\r\n$4\r\nECHO\r\n$0\r\n\r\n$5\r\na\r\n\0b\r\n", 31));
  }
  SUBCASE("append_command adds to what is there: a pipeline") {
    std::string out = format_command({"PING"});
    const std::string_view args[] = {"GET", "x"};
    append_command(out, args);
    CHECK(out == "*1\r\n$4\r\nPING\r\n*2\r\n$3\r\nGET\r\n$1\r\nx\r\n");
  }
}

TEST_CASE("commands are the bytes hiredis's redisFormatCommandArgv makes") {
  std::mt19937 rng(7);
  for (int round = 0; round < 200; ++round) {
    std::vector<std::string> args(1 + rng() % 80);
    for (std::string& a : args) {
      a.resize(rng() % 3 == 0 ? rng() % 2000 : rng() % 12);
      for (char& c : a) {
        c = static_cast<char>(rng() % 256);
      }
    }
    std::vector<const char*> argv;
    std::vector<std::size_t> lens;
    std::vector<std::string_view> views;
    for (const std::string& a : args) {
      argv.push_back(a.data());
      lens.push_back(a.size());
      views.emplace_back(a);
    }
    char* expected = nullptr;
    const int n =
        redisFormatCommandArgv(&expected, static_cast<int>(args.size()), argv.data(), lens.data());
    REQUIRE(n > 0);
    std::string out = "prefix";
    append_command(out, views);
    CHECK(out == "prefix" + std::string(expected, static_cast<std::size_t>(n)));
    redisFreeCommand(expected);
  }
}

TEST_CASE("replies of every RESP2 type parse through the hiredis reader") {
  CHECK(parse_one("+OK\r\n").type == reply::kind::status);
  CHECK(parse_one("+OK\r\n").str == "OK");
  CHECK(parse_one(":-42\r\n").integer == -42);
  CHECK(parse_one("$5\r\nhello\r\n").str == "hello");
  CHECK(parse_one("$-1\r\n").type == reply::kind::nil);
  CHECK(parse_one("*-1\r\n").type == reply::kind::nil);

  const reply e = parse_one("-MOVED 3999 127.0.0.1:6381\r\n");
  CHECK(e.is_error());
  CHECK(e.error_code() == "MOVED");
  CHECK(parse_one("-NOSCRIPT No matching script. Please use EVAL.\r\n").error_code() == "NOSCRIPT");
  CHECK(parse_one("+OK\r\n").error_code().empty());

  const reply a = parse_one("*3\r\n:1\r\n*2\r\n$1\r\na\r\n$-1\r\n+x\r\n");
  REQUIRE(a.type == reply::kind::array);
  REQUIRE(a.elements.size() == 3);
  CHECK(a.elements[0].integer == 1);
  CHECK(a.elements[1].elements[0].str == "a");
  CHECK(a.elements[1].elements[1].type == reply::kind::nil);
  CHECK(a.elements[2].str == "x");
}

TEST_CASE("the reader yields pipelined replies in order and waits for partial ones") {
  reply_reader reader;
  const std::string bytes = ":1\r\n$3\r\nabc\r\n*2\r\n:7\r\n:8\r\n";
  reply r;
  // Byte by byte: nothing comes out before a reply is whole.
  std::vector<reply> got;
  for (char c : bytes) {
    reader.feed(&c, 1);
    while (reader.next(r) == reply_reader::status::reply) {
      got.push_back(r);
    }
  }
  REQUIRE(got.size() == 3);
  CHECK(got[0].integer == 1);
  CHECK(got[1].str == "abc");
  CHECK(got[2].elements[1].integer == 8);
  CHECK(reader.next(r) == reply_reader::status::incomplete);
}

TEST_CASE("a protocol error is reported, and reset makes the reader usable again") {
  reply_reader reader;
  reader.feed("?what\r\n", 7);
  reply r;
  CHECK(reader.next(r) == reply_reader::status::protocol_error);
  CHECK_FALSE(reader.error().empty());
  reader.reset();
  reader.feed(":5\r\n", 4);
  REQUIRE(reader.next(r) == reply_reader::status::reply);
  CHECK(r.integer == 5);
}

TEST_CASE("a reply past the reader's bounds is a protocol error, not memory spent on it") {
  reply_reader reader;
  reply r;
  SUBCASE("a bulk string larger than k_max_reply_bytes, fed as it comes") {
    const std::string header = "$" + std::to_string(reply_reader::k_max_reply_bytes + 1) + "\r\n";
    reader.feed(header.data(), header.size());
    CHECK(reader.next(r) == reply_reader::status::incomplete);
    const std::string piece(64 * 1024, 'x');
    reply_reader::status st = reply_reader::status::incomplete;
    std::size_t fed = header.size();
    while (st == reply_reader::status::incomplete && fed <= 2 * reply_reader::k_max_reply_bytes) {
      reader.feed(piece.data(), piece.size());
      fed += piece.size();
      st = reader.next(r);
    }
    CHECK(st == reply_reader::status::protocol_error);
    CHECK(fed > reply_reader::k_max_reply_bytes);
    CHECK(fed <= reply_reader::k_max_reply_bytes + header.size() + piece.size());
    CHECK(reader.error().find("a reply larger than") == 0);
    CHECK(reader.next(r) == reply_reader::status::protocol_error);  // it stays so
  }
  SUBCASE("an array whose elements add up past the bound, each small") {
    const std::string header = "*" + std::to_string(reply_reader::k_max_elements) + "\r\n";
    reader.feed(header.data(), header.size());
    // k_max_elements of these are about twice k_max_reply_bytes.
    const std::size_t each = 2 * reply_reader::k_max_reply_bytes / reply_reader::k_max_elements;
    std::string element = "$" + std::to_string(each) + "\r\n" + std::string(each, 'y') + "\r\n";
    reply_reader::status st = reply_reader::status::incomplete;
    for (long long i = 0;
         i < reply_reader::k_max_elements && st == reply_reader::status::incomplete; ++i) {
      reader.feed(element.data(), element.size());
      if (i % 64 == 0) {
        st = reader.next(r);
      }
    }
    CHECK(st == reply_reader::status::protocol_error);
  }
  SUBCASE("a count that is none: below -1, or past an int") {
    // hiredis refuses these itself ("Multi-bulk length out of range"); they stay refused.
    for (const std::string bytes :
         {"*-2\r\n", "*4294967296\r\n:1\r\n", "*4294967297\r\n:1\r\n", "*2147483648\r\n",
          "*2\r\n*-5\r\n:1\r\n", "*99999999999999999999\r\n"}) {
      CAPTURE(bytes);
      reply_reader fresh;
      fresh.feed(bytes.data(), bytes.size());
      CHECK(fresh.next(r) == reply_reader::status::protocol_error);
    }
  }
  SUBCASE("nil and empty arrays are replies, at the top and nested") {
    const std::string bytes = "*-1\r\n*0\r\n*2\r\n*0\r\n*-1\r\n";
    reader.feed(bytes.data(), bytes.size());
    REQUIRE(reader.next(r) == reply_reader::status::reply);
    CHECK(r.type == reply::kind::nil);
    REQUIRE(reader.next(r) == reply_reader::status::reply);
    CHECK(r.type == reply::kind::array);
    CHECK(r.elements.empty());
    REQUIRE(reader.next(r) == reply_reader::status::reply);
    REQUIRE(r.elements.size() == 2);
    CHECK(r.elements[0].elements.empty());
    CHECK(r.elements[1].type == reply::kind::nil);
  }
  SUBCASE("an array of more than k_max_elements, refused from its first line") {
    const std::string header = "*" + std::to_string(reply_reader::k_max_elements + 1) + "\r\n";
    reader.feed(header.data(), header.size());
    CHECK(reader.next(r) == reply_reader::status::protocol_error);
    CHECK(reader.error().find("an array of more than") != std::string::npos);
  }
  SUBCASE("within the bounds: k_max_elements elements, then the next reply") {
    std::string bytes = "*" + std::to_string(reply_reader::k_max_elements) + "\r\n";
    for (long long i = 0; i < reply_reader::k_max_elements; ++i) {
      bytes += ":7\r\n";
    }
    bytes += "+OK\r\n";
    reader.feed(bytes.data(), bytes.size());
    REQUIRE(reader.next(r) == reply_reader::status::reply);
    CHECK(r.elements.size() == static_cast<std::size_t>(reply_reader::k_max_elements));
    REQUIRE(reader.next(r) == reply_reader::status::reply);
    CHECK(r.str == "OK");
  }
  SUBCASE("many replies, each small, far past the bound in all: each is taken") {
    const std::string one = "$1000\r\n" + std::string(1000, 'z') + "\r\n";
    std::size_t taken = 0;
    for (int i = 0; i < 10'000; ++i) {
      reader.feed(one.data(), one.size());
      while (reader.next(r) == reply_reader::status::reply) {
        ++taken;
      }
    }
    CHECK(taken == 10'000);
  }
}
