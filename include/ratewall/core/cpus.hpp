#pragma once

// How many CPUs this process may use (server.threads: 0): the CPUs its affinity mask allows
// (taskset, cpuset, a container's --cpuset-cpus), bounded by its cgroup's CPU quota (a
// container's --cpus, systemd's CPUQuota=), rounded up. A worker per host core would
// otherwise run on a quota of two CPUs and spend its time throttled.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace ratewall {

/// At least 1. Reads sched_getaffinity and /proc/self/cgroup with cgroup v2's cpu.max or v1's
/// cpu.cfs_quota_us / cpu.cfs_period_us under /sys/fs/cgroup.
unsigned usable_cpus();

/// The CPUs a quota of `quota` per `period` allows, rounded up (1.5 CPUs: 2); nullopt for no
/// quota (a period of 0 included).
std::optional<unsigned> cpus_of_quota(std::int64_t quota, std::int64_t period);
/// cgroup v2's cpu.max: "max 100000" → nullopt, "200000 100000" → 2; nullopt for text that is
/// not "<quota|max> <period>".
std::optional<unsigned> cpus_of_cpu_max(std::string_view text);
/// The cgroup of this process from /proc/self/cgroup's text: for `controller` "" the v2 entry
/// ("0::/path"), else the v1 entry listing that controller ("4:cpu,cpuacct:/path").
std::optional<std::string> cgroup_path(std::string_view proc_self_cgroup,
                                       std::string_view controller);

}  // namespace ratewall
