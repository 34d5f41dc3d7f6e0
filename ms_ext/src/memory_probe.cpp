// ms_ext_mapped: whether a range of this process's address space is mapped, without touching it.
//
// MindSpore calls a kernel's C++ shape inference with the input shape arrays but not with their length, so a
// primitive called with fewer inputs than the kernel declares hands it arrays that end early: the entries past the
// end are whatever the heap holds. ms_ext checks each entry before reading through it (detail/shape_arrays.h);
// mincore() answers ENOMEM for an unmapped page instead of faulting.
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>

#include "ms_ext/c_api.h"

extern "C" int ms_ext_mapped(const void *address, size_t bytes) {
  if (address == nullptr) return 0;
  static const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const uintptr_t start = reinterpret_cast<uintptr_t>(address) & ~(page - 1);
  const uintptr_t end = reinterpret_cast<uintptr_t>(address) + (bytes == 0 ? 1 : bytes);
  if (end < start) return 0;  // wrapped around
  unsigned char pages[64];
  for (uintptr_t at = start; at < end; at += page * sizeof(pages)) {
    const uintptr_t length = end - at < page * sizeof(pages) ? end - at : page * sizeof(pages);
    if (mincore(reinterpret_cast<void *>(at), length, pages) != 0) return 0;
  }
  return 1;
}
