// A zeroed buffer that holds no memory until it is written: the KV cache's start
// (engine/device/kv_cache.py), called from a jitted JAX program through XLA's FFI.
//
// XLA fills `jnp.zeros` by writing every byte, so a cache sized for every sequence at its
// longest is resident from the start (180 MiB for SmolLM2 at 32 sequences in bfloat16), used
// or not. Here the whole pages inside the buffer are handed back to the kernel instead
// (madvise MADV_DONTNEED on private anonymous memory, which XLA's allocations are): they
// read as zeros, and each becomes resident only once a step writes a key or value to it.
// The partial pages at either end are zeroed by hand, and if the kernel refuses, so is the
// rest: the result is zeros either way, wherever the memory came from. Any arguments are
// ignored: a result aliased to one (ffi_call's input_output_aliases) zeroes it in place,
// which is how the tests hand it memory that held other values.

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>

#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace {

ffi::Error Zeros(ffi::RemainingArgs, ffi::Result<ffi::AnyBuffer> out) {
  char* data = static_cast<char*>(out->untyped_data());
  const size_t size = out->size_bytes();
  const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const uintptr_t start = reinterpret_cast<uintptr_t>(data), end = start + size;
  const uintptr_t first = (start + page - 1) / page * page, last = end / page * page;
  if (last <= first) {
    std::memset(data, 0, size);
    return ffi::Error::Success();
  }
  std::memset(data, 0, first - start);
  std::memset(reinterpret_cast<char*>(last), 0, end - last);
  if (madvise(reinterpret_cast<void*>(first), last - first, MADV_DONTNEED) != 0)
    std::memset(reinterpret_cast<char*>(first), 0, last - first);
  return ffi::Error::Success();
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(FlintZeros, Zeros, ffi::Ffi::Bind().RemainingArgs().Ret<ffi::AnyBuffer>());
