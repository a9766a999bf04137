// reserve_huge: the buffer of a large array is marked for huge pages (the kernel shows the mark
// as "hg" in the mapping's VmFlags), a small one is left alone.

#include "ratewall/core/huge_pages.hpp"

#include <doctest/doctest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

using namespace ratewall;

namespace {

// The VmFlags line of the mapping holding `address`, from /proc/self/smaps.
std::string vm_flags_of(const void* address) {
  const auto at = reinterpret_cast<std::uintptr_t>(address);
  std::ifstream smaps("/proc/self/smaps");
  std::string line;
  bool inside = false;
  while (std::getline(smaps, line)) {
    std::uintptr_t begin = 0;
    std::uintptr_t end = 0;
    char dash = 0;
    std::istringstream head(line);
    if (head >> std::hex >> begin >> dash >> end && dash == '-' && line.find(':') > 20) {
      inside = begin <= at && at < end;
    } else if (inside && line.starts_with("VmFlags:")) {
      return line;
    }
  }
  return "";
}

bool advised(const std::string& flags) {
  return flags.find(" hg") != std::string::npos;
}

}  // namespace

TEST_CASE("reserve_huge marks a large array's memory for huge pages, not a small one's") {
  if (!std::filesystem::exists("/sys/kernel/mm/transparent_hugepage")) {
    MESSAGE("this kernel has no transparent huge pages: nothing to mark");
    return;
  }
  std::vector<std::uint64_t> large;
  reserve_huge(large, 8u << 20);  // 64 MiB
  REQUIRE(large.capacity() >= 8u << 20);
  // The middle of the buffer: its first and last pages may share a mapping with other memory.
  const std::string flags = vm_flags_of(large.data() + (4u << 20));
  REQUIRE_FALSE(flags.empty());
  CHECK(advised(flags));

  std::vector<std::uint64_t> small;
  reserve_huge(small, 16);
  CHECK(small.capacity() >= 16);
  CHECK_FALSE(advised(vm_flags_of(small.data())));
}
