#include "ratewall/limit/recent_denials.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <string>
#include <vector>

using namespace ratewall;
using std::chrono::hours;
using std::chrono::minutes;
using std::chrono::seconds;

namespace {

// Every subject with denials in the window at `now`, most first.
std::vector<denied_subject> listed(const recent_denials& d, nanos now) {
  std::vector<denied_subject> all;
  d.collect(now, all);
  return most_denied(std::move(all), all.size());
}

// The denials of `subject` in the window at `now`; 0 when it is not listed.
std::uint64_t denials_of(const recent_denials& d, const std::string& subject, nanos now) {
  for (const denied_subject& s : listed(d, now)) {
    if (s.subject == subject) {
      return s.denied;
    }
  }
  return 0;
}

}  // namespace

TEST_CASE("a denial counts for at least the window, and is gone one slice later") {
  recent_denials d(100, minutes(10));  // slices of 1m
  d.add("alice", seconds(30));
  CHECK(denials_of(d, "alice", seconds(30)) == 1);
  CHECK(denials_of(d, "alice", seconds(30) + minutes(10)) == 1);  // a whole window later
  CHECK(denials_of(d, "alice", minutes(11) - nanos{1}) == 1);     // its slice's window ends
  CHECK(denials_of(d, "alice", minutes(11)) == 0);
  CHECK(listed(d, minutes(11)).empty());
}

TEST_CASE("old slices fall out of a subject's count one by one") {
  recent_denials d(100, minutes(10));
  d.add("alice", nanos{0});
  d.add("alice", minutes(3));
  d.add("alice", minutes(3) + seconds(59));
  for (int i = 0; i < 4; ++i) {
    d.add("alice", minutes(7));
  }
  CHECK(denials_of(d, "alice", minutes(7)) == 7);
  CHECK(denials_of(d, "alice", minutes(11) - nanos{1}) == 7);
  CHECK(denials_of(d, "alice", minutes(11)) == 6);  // the one at 0 is out
  CHECK(denials_of(d, "alice", minutes(14)) == 4);  // the two of 3m too
  CHECK(denials_of(d, "alice", minutes(18) - nanos{1}) == 4);
  CHECK(denials_of(d, "alice", minutes(18)) == 0);

  SUBCASE("a denial long after the last reuses the ring's places without old counts") {
    d.add("alice", minutes(30));
    CHECK(denials_of(d, "alice", minutes(30)) == 1);
    d.add("alice", minutes(33));
    CHECK(denials_of(d, "alice", minutes(33)) == 2);
  }
}

TEST_CASE("a denial counted with an earlier now than the latest counts in its own slice") {
  // Two threads read the clock, then take the lock in the other order.
  recent_denials d(100, minutes(10));
  d.add("alice", minutes(25));
  d.add("alice", minutes(24));
  CHECK(denials_of(d, "alice", minutes(25)) == 2);
  CHECK(denials_of(d, "alice", minutes(35)) == 1);  // 24m's slice is out, 25m's is not
  SUBCASE("one older than the window is not counted") {
    d.add("alice", minutes(5));
    CHECK(denials_of(d, "alice", minutes(25)) == 2);
  }
}

TEST_CASE("prune forgets the subjects with nothing left in the window") {
  recent_denials d(100, minutes(10));
  d.add("alice", nanos{0});
  d.add("bob", minutes(5));
  CHECK(d.prune(minutes(11) - nanos{1}) == 0);
  CHECK(d.prune(minutes(11)) == 1);
  CHECK(d.size() == 1);
  CHECK(denials_of(d, "bob", minutes(11)) == 1);
}

TEST_CASE("a full table drops the half with the fewest denials, the least recent first") {
  recent_denials d(4, minutes(10));
  for (int i = 0; i < 3; ++i) {
    d.add("a", nanos{0});
  }
  d.add("b", nanos{0});
  d.add("c", minutes(1));
  d.add("d", nanos{0});
  d.add("d", nanos{0});
  CHECK(d.size() == 4);
  d.add("e", minutes(2));  // full: b (1, older) and c (1) go, a (3) and d (2) stay
  CHECK(d.size() == 3);
  const std::vector<denied_subject> top = listed(d, minutes(2));
  REQUIRE(top.size() == 3);
  CHECK(top[0].subject == "a");
  CHECK(top[1].subject == "d");
  CHECK(top[2].subject == "e");

  SUBCASE("subjects with no denial left in the window go before any other") {
    recent_denials old(2, minutes(10));
    for (int i = 0; i < 5; ++i) {
      old.add("old", nanos{0});
    }
    old.add("new", minutes(30));
    old.add("newer", minutes(30));  // full: "old" has none left at 30m
    CHECK(denials_of(old, "new", minutes(30)) == 1);
    CHECK(denials_of(old, "newer", minutes(30)) == 1);
    CHECK(old.size() == 2);
  }
}

TEST_CASE("a flood of distinct subjects stays within capacity; a subject denied often stays") {
  recent_denials d(1000, minutes(10));
  for (int i = 0; i < 50; ++i) {
    d.add("heavy", nanos{i});
  }
  std::size_t most = 0;
  for (int i = 0; i < 100000; ++i) {
    d.add("flood-" + std::to_string(i), seconds(1));
    most = std::max(most, d.size());
  }
  CHECK(most == 1000);
  const std::vector<denied_subject> top = listed(d, seconds(1));
  REQUIRE_FALSE(top.empty());
  CHECK(top[0].subject == "heavy");
  CHECK(top[0].denied == 50);
}

TEST_CASE("most_denied orders by count, then by subject, and keeps n") {
  const std::vector<denied_subject> top =
      most_denied({{"b", 2}, {"d", 7}, {"a", 2}, {"c", 9}, {"e", 1}}, 4);
  REQUIRE(top.size() == 4);
  CHECK(top[0].subject == "c");
  CHECK(top[1].subject == "d");
  CHECK(top[2].subject == "a");  // 2 denials, like b: by subject
  CHECK(top[3].subject == "b");
  CHECK(most_denied({{"a", 1}}, 10).size() == 1);
}

TEST_CASE("a new window: counts carry over as of each subject's latest denial") {
  recent_denials d(100, minutes(10));
  d.add("alice", nanos{0});
  d.add("alice", nanos{0});
  d.add("bob", minutes(4) + seconds(30));

  SUBCASE("longer: listed until the new window has passed since the latest denial") {
    d.set_window(hours(1), minutes(5));  // slices of 6m
    CHECK(d.window() == hours(1));
    CHECK(denials_of(d, "alice", minutes(5)) == 2);
    // alice's latest denial was before 1m (its old slice's end): in the new slice 0.
    CHECK(denials_of(d, "alice", minutes(66) - nanos{1}) == 2);
    CHECK(denials_of(d, "alice", minutes(66)) == 0);
    CHECK(denials_of(d, "bob", minutes(5)) == 1);
    d.add("alice", minutes(10));
    CHECK(denials_of(d, "alice", minutes(10)) == 3);
  }
  SUBCASE("shorter: a subject whose latest denial is past the new window is gone") {
    d.set_window(minutes(1), minutes(5));  // slices of 6s
    CHECK(denials_of(d, "alice", minutes(5)) == 0);
    CHECK(d.size() == 1);
    CHECK(denials_of(d, "bob", minutes(5)) == 1);  // at 4m30s: within the last minute
    // Taken as made at 4m59.999...s, in the new slice 4m54s-5m: counted until 6m.
    CHECK(denials_of(d, "bob", minutes(6) - nanos{1}) == 1);
    CHECK(denials_of(d, "bob", minutes(6)) == 0);
  }
  SUBCASE("the same window changes nothing") {
    d.set_window(minutes(10), minutes(5));
    CHECK(denials_of(d, "alice", minutes(11) - nanos{1}) == 2);
    CHECK(denials_of(d, "alice", minutes(11)) == 0);
  }
}
