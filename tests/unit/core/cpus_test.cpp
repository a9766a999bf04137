// usable_cpus's parts: a CPU quota from cgroup v2 and v1 files, and this process's cgroup.

#include <doctest/doctest.h>
#include <sched.h>

#include "ratewall/core/cpus.hpp"

using namespace ratewall;

TEST_CASE("a CPU quota allows its CPUs rounded up; no quota is no bound") {
  CHECK(cpus_of_cpu_max("max 100000\n") == std::nullopt);
  CHECK(cpus_of_cpu_max("200000 100000\n") == 2u);
  CHECK(cpus_of_cpu_max("150000 100000") == 2u);  // 1.5 CPUs: a second thread has work
  CHECK(cpus_of_cpu_max("50000 100000") == 1u);
  CHECK(cpus_of_cpu_max("") == std::nullopt);
  CHECK(cpus_of_cpu_max("200000") == std::nullopt);
  CHECK(cpus_of_cpu_max("lots 100000") == std::nullopt);
  CHECK(cpus_of_quota(-1, 100000) == std::nullopt);  // v1's "no quota"
  CHECK(cpus_of_quota(400000, 100000) == 4u);
  CHECK(cpus_of_quota(100000, 0) == std::nullopt);
}

TEST_CASE("this process's cgroup, v2 and v1") {
  const std::string v2 = "0::/system.slice/ratewall.service\n";
  CHECK(cgroup_path(v2, "") == "/system.slice/ratewall.service");
  CHECK(cgroup_path(v2, "cpu") == std::nullopt);
  const std::string hybrid = "5:cpuset:/\n4:cpu,cpuacct:/docker/abc\n1:name=systemd:/x\n0::/\n";
  CHECK(cgroup_path(hybrid, "cpu") == "/docker/abc");
  CHECK(cgroup_path(hybrid, "cpuacct") == "/docker/abc");
  CHECK(cgroup_path(hybrid, "") == "");  // the root: /sys/fs/cgroup itself
  CHECK(cgroup_path("garbage", "") == std::nullopt);
}

TEST_CASE("usable_cpus never exceeds the affinity mask, and is at least 1") {
  cpu_set_t set;
  CPU_ZERO(&set);
  REQUIRE(::sched_getaffinity(0, sizeof set, &set) == 0);
  const unsigned cpus = usable_cpus();
  CHECK(cpus >= 1);
  CHECK(cpus <= static_cast<unsigned>(CPU_COUNT(&set)));
}
