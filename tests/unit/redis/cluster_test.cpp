#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "ratewall/redis/cluster.hpp"

using namespace ratewall::redis;

namespace {

reply parse(const std::string& bytes) {
  reply_reader reader;
  reader.feed(bytes.data(), bytes.size());
  reply r;
  REQUIRE(reader.next(r) == reply_reader::status::reply);
  return r;
}

std::string bulk(const std::string& s) {
  return "$" + std::to_string(s.size()) + "\r\n" + s + "\r\n";
}

const node_address k_asked{"10.0.0.9", 7000};

}  // namespace

TEST_CASE("CLUSTER SLOTS: ranges to primaries, replicas ignored, empty host = the node asked") {
  // Three primaries; the second range has a replica; the third primary announces no host.
  const std::string text =
      "*3\r\n"
      "*3\r\n:0\r\n:5460\r\n*3\r\n" +
      bulk("127.0.0.1") + ":30001\r\n" + bulk("id1") + "*4\r\n:5461\r\n:10922\r\n*3\r\n" +
      bulk("127.0.0.1") + ":30002\r\n" + bulk("id2") + "*3\r\n" + bulk("127.0.0.1") + ":30005\r\n" +
      bulk("id5") + "*3\r\n:10923\r\n:16383\r\n*3\r\n" + bulk("") + ":30003\r\n" + bulk("id3");
  std::string error;
  auto map = slot_map::from_cluster_slots(parse(text), k_asked, &error);
  REQUIRE_MESSAGE(map, error);
  CHECK(map->covered() == 16384);
  REQUIRE(map->primaries().size() == 3);
  CHECK(*map->node_for(0) == node_address{"127.0.0.1", 30001});
  CHECK(*map->node_for(5460) == node_address{"127.0.0.1", 30001});
  CHECK(*map->node_for(5461) == node_address{"127.0.0.1", 30002});
  CHECK(*map->node_for(16383) == node_address{"10.0.0.9", 30003});
  CHECK(map->owner(10922) == 1);
}

TEST_CASE("CLUSTER SLOTS: holes stay unassigned; malformed replies are errors") {
  const std::string text = "*1\r\n*3\r\n:100\r\n:200\r\n*2\r\n" + bulk("127.0.0.1") + ":30001\r\n";
  auto map = slot_map::from_cluster_slots(parse(text), k_asked, nullptr);
  REQUIRE(map);
  CHECK(map->covered() == 101);
  CHECK(map->node_for(99) == nullptr);
  CHECK(map->owner(201) == -1);

  std::string error;
  CHECK_FALSE(slot_map::from_cluster_slots(parse("-ERR This instance has cluster support "
                                                 "disabled\r\n"),
                                           k_asked, &error));
  CHECK(error.find("cluster support disabled") != std::string::npos);
  CHECK_FALSE(slot_map::from_cluster_slots(
      parse("*1\r\n*3\r\n:0\r\n:16384\r\n*2\r\n" + bulk("h") + ":1\r\n"), k_asked, nullptr));
  CHECK_FALSE(slot_map::from_cluster_slots(parse("*1\r\n*2\r\n:0\r\n:5\r\n"), k_asked, nullptr));
}

TEST_CASE("CLUSTER SHARDS (Redis 7): the master of each shard serves its slot ranges") {
  auto node = [](const std::string& id, int port, const std::string& endpoint,
                 const std::string& role) {
    return "*14\r\n" + bulk("id") + bulk(id) + bulk("port") + ":" + std::to_string(port) + "\r\n" +
           bulk("ip") + bulk("127.0.0.1") + bulk("endpoint") + bulk(endpoint) + bulk("role") +
           bulk(role) + bulk("replication-offset") + ":0\r\n" + bulk("health") + bulk("online");
  };
  const std::string text =
      "*2\r\n"
      "*4\r\n" +
      bulk("slots") + "*4\r\n:0\r\n:100\r\n:200\r\n:300\r\n" + bulk("nodes") + "*2\r\n" +
      node("r1", 30004, "127.0.0.1", "replica") + node("m1", 30001, "?", "master") + "*4\r\n" +
      bulk("slots") + "*2\r\n:101\r\n:199\r\n" + bulk("nodes") + "*1\r\n" +
      node("m2", 30002, "redis-2.internal", "master");
  std::string error;
  auto map = slot_map::from_cluster_shards(parse(text), k_asked, &error);
  REQUIRE_MESSAGE(map, error);
  CHECK(map->covered() == 301);
  // endpoint "?" (unknown): the ip field.
  CHECK(*map->node_for(0) == node_address{"127.0.0.1", 30001});
  CHECK(*map->node_for(300) == node_address{"127.0.0.1", 30001});
  CHECK(*map->node_for(150) == node_address{"redis-2.internal", 30002});
  CHECK(map->node_for(301) == nullptr);
}

TEST_CASE("MOVED and ASK redirects name the slot and the node") {
  auto moved = parse_redirect(parse("-MOVED 3999 127.0.0.1:6381\r\n"), k_asked);
  REQUIRE(moved);
  CHECK(moved->type == redirect::kind::moved);
  CHECK(moved->slot == 3999);
  CHECK(moved->to == node_address{"127.0.0.1", 6381});

  auto ask = parse_redirect(parse("-ASK 12 ::1:7002\r\n"), k_asked);
  REQUIRE(ask);
  CHECK(ask->type == redirect::kind::ask);
  CHECK(ask->to == node_address{"::1", 7002});
  CHECK(ask->to.to_string() == "[::1]:7002");

  SUBCASE("an empty host, or ? (an unknown endpoint), is the host of the node that answered") {
    auto r = parse_redirect(parse("-MOVED 5 :7005\r\n"), k_asked);
    REQUIRE(r);
    CHECK(r->to == node_address{"10.0.0.9", 7005});
    // Redis 7 with cluster-preferred-endpoint-type hostname, for a node without one.
    auto unknown = parse_redirect(parse("-MOVED 3999 ?:6381\r\n"), k_asked);
    REQUIRE(unknown);
    CHECK(unknown->to == node_address{"10.0.0.9", 6381});
  }
  SUBCASE("anything else is not a redirect") {
    CHECK_FALSE(parse_redirect(parse("-ERR unknown command\r\n"), k_asked));
    CHECK_FALSE(parse_redirect(parse("-MOVED 16384 127.0.0.1:1\r\n"), k_asked));
    CHECK_FALSE(parse_redirect(parse("-MOVED x 127.0.0.1:1\r\n"), k_asked));
    CHECK_FALSE(parse_redirect(parse("+MOVED 1 127.0.0.1:1\r\n"), k_asked));
  }
}

TEST_CASE("CLUSTER SLOTS and SHARDS: every integer is checked; one out of range fails the map") {
  // One range of CLUSTER SLOTS: first, last, then the primary's host and port.
  const auto slots = [](const std::string& first, const std::string& last,
                        const std::string& port) {
    return "*1\r\n*3\r\n" + first + last + "*2\r\n" + bulk("127.0.0.1") + port;
  };
  // One shard of CLUSTER SHARDS: its slot ranges and its master's port.
  const auto shards = [](const std::string& ranges, const std::string& port) {
    return "*1\r\n*4\r\n" + bulk("slots") + ranges + bulk("nodes") + "*1\r\n*6\r\n" + bulk("port") +
           port + bulk("ip") + bulk("127.0.0.1") + bulk("role") + bulk("master");
  };
  struct row {
    const char* what;
    std::string bytes;
    bool shards;
    bool valid;
  };
  const std::vector<row> table{
      {"slots: a whole range", slots(":0\r\n", ":16383\r\n", ":7001\r\n"), false, true},
      {"slots: numbers as strings", slots(bulk("1"), bulk("2"), bulk("7001")), false, true},
      {"slots: first negative", slots(":-1\r\n", ":5\r\n", ":7001\r\n"), false, false},
      {"slots: last past 16383", slots(":0\r\n", ":16384\r\n", ":7001\r\n"), false, false},
      {"slots: last before first", slots(":9\r\n", ":8\r\n", ":7001\r\n"), false, false},
      {"slots: INT64 bounds",
       slots(":-9223372036854775808\r\n", ":9223372036854775807\r\n", ":7001\r\n"), false, false},
      {"slots: port 0", slots(":0\r\n", ":1\r\n", ":0\r\n"), false, false},
      {"slots: port negative", slots(":0\r\n", ":1\r\n", ":-7001\r\n"), false, false},
      {"slots: port 65536", slots(":0\r\n", ":1\r\n", ":65536\r\n"), false, false},
      {"slots: port not a number", slots(":0\r\n", ":1\r\n", bulk("70x")), false, false},
      {"slots: port nil", slots(":0\r\n", ":1\r\n", "$-1\r\n"), false, false},
      {"slots: slot nil", slots("$-1\r\n", ":1\r\n", ":7001\r\n"), false, false},
      {"slots: slot an array", slots("*0\r\n", ":1\r\n", ":7001\r\n"), false, false},
      {"shards: a range", shards("*2\r\n:0\r\n:100\r\n", ":7001\r\n"), true, true},
      {"shards: slot past 16383", shards("*2\r\n:0\r\n:16384\r\n", ":7001\r\n"), true, false},
      {"shards: slot negative", shards("*2\r\n:-5\r\n:1\r\n", ":7001\r\n"), true, false},
      {"shards: an odd number of bounds", shards("*3\r\n:0\r\n:1\r\n:2\r\n", ":7001\r\n"), true,
       false},
      {"shards: port 0", shards("*2\r\n:0\r\n:1\r\n", ":0\r\n"), true, false},
      {"shards: port 99999", shards("*2\r\n:0\r\n:1\r\n", ":99999\r\n"), true, false},
      {"shards: port a status", shards("*2\r\n:0\r\n:1\r\n", "+OK\r\n"), true, false},
  };
  for (const row& r : table) {
    INFO(r.what);
    const reply parsed = parse(r.bytes);
    const auto map = r.shards ? slot_map::from_cluster_shards(parsed, k_asked, nullptr)
                              : slot_map::from_cluster_slots(parsed, k_asked, nullptr);
    CHECK(map.has_value() == r.valid);
  }
}
