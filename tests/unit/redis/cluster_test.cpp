#include <doctest/doctest.h>

#include <string>

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

  SUBCASE("an empty host is the host of the node that answered") {
    auto r = parse_redirect(parse("-MOVED 5 :7005\r\n"), k_asked);
    REQUIRE(r);
    CHECK(r->to == node_address{"10.0.0.9", 7005});
  }
  SUBCASE("anything else is not a redirect") {
    CHECK_FALSE(parse_redirect(parse("-ERR unknown command\r\n"), k_asked));
    CHECK_FALSE(parse_redirect(parse("-MOVED 16384 127.0.0.1:1\r\n"), k_asked));
    CHECK_FALSE(parse_redirect(parse("-MOVED x 127.0.0.1:1\r\n"), k_asked));
    CHECK_FALSE(parse_redirect(parse("+MOVED 1 127.0.0.1:1\r\n"), k_asked));
  }
}
