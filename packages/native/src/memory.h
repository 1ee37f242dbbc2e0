// Memory handed to the device. A registration keeps a share of the bytes' v8::BackingStore, so
// they outlive whatever JavaScript does with the ArrayBuffer: drop it, transfer it
// (structuredClone(ab, { transfer: [ab] }) moves the same store to a new ArrayBuffer) or detach
// it. Allocations from allocate() are external ArrayBuffers whose finalizer frees the memory,
// and that finalizer runs only once the last share of the store is gone.
#pragma once

#include <napi.h>
#include <v8.h>

#include <cstddef>
#include <memory>

#include "errors.h"

namespace rdma {

struct Bytes {
  void* data = nullptr;
  std::size_t size = 0;
  std::shared_ptr<v8::BackingStore> owner;
};

// Resolves a Uint8Array to its bytes, refusing what C would refuse (NULL, size 0) and what cannot
// be kept alive (a detached, shared or resizable buffer). On refusal, throws through `call` and
// returns false.
bool ResolveBytes(const Call& call, Napi::Value value, Bytes* out);

Napi::Value Allocate(const Napi::CallbackInfo& info);
Napi::Value Free(const Napi::CallbackInfo& info);
Napi::Value LiveAllocations(const Napi::CallbackInfo& info);
// mmap(MAP_SHARED) of a file or device: (path, offset, size | undefined, create). The mapping is an
// external ArrayBuffer; unmapFile() msyncs and detaches it, and munmap follows once registrations
// over it have let go of its store, as free() does for allocations.
Napi::Value MapFile(const Napi::CallbackInfo& info);
Napi::Value UnmapFile(const Napi::CallbackInfo& info);
Napi::Value LiveMappings(const Napi::CallbackInfo& info);

}  // namespace rdma
