#include "casting/memory/malloc_settings.h"

#include <c10/core/impl/alloc_cpu.h>
#include <stdlib.h>

#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>

#include "gtest/gtest.h"

namespace castserve::casting {
namespace {

std::string Env(const char* name) {
  const char* value = getenv(name);
  return value == nullptr ? "(unset)" : value;
}

// The VmFlags line of the mapping that holds `address` in /proc/self/smaps,
// or "" when none does.
std::string VmFlagsAt(const void* address) {
  const auto target = reinterpret_cast<uintptr_t>(address);
  std::ifstream smaps("/proc/self/smaps");
  std::string line;
  bool inside = false;
  while (std::getline(smaps, line)) {
    uintptr_t begin = 0, end = 0;
    char dash = 0;
    std::istringstream range(line);
    if (range >> std::hex >> begin >> dash >> end && dash == '-') {
      inside = begin <= target && target < end;
    } else if (inside && line.rfind("VmFlags:", 0) == 0) {
      return line;
    }
  }
  return "";
}

// One test: LibTorch reads the variable once, at its first large allocation.
TEST(MallocSettingsTest, LargeAllocationsAreAdvisedAsHugePages) {
  ASSERT_EQ(setenv("THP_MEM_ALLOC_ENABLE", "0", 1), 0);
  UseServingMallocSettings();
  EXPECT_EQ(Env("THP_MEM_ALLOC_ENABLE"), "0");  // The operator's value wins.

  ASSERT_EQ(unsetenv("THP_MEM_ALLOC_ENABLE"), 0);
  UseServingMallocSettings();
  EXPECT_EQ(Env("THP_MEM_ALLOC_ENABLE"), "1");

  // "hg": madvise(MADV_HUGEPAGE) was applied, whatever the kernel's setting.
  constexpr size_t kBytes = size_t{40} << 20;
  void* data = c10::alloc_cpu(kBytes);
  const std::string flags = VmFlagsAt(static_cast<char*>(data) + kBytes / 2);
  EXPECT_NE(flags.find(" hg"), std::string::npos) << flags;
  c10::free_cpu(data);
}

}  // namespace
}  // namespace castserve::casting
