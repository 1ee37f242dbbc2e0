#include "memory.h"

#include <fcntl.h>
#include <librpma.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <unordered_map>

namespace rdma {

namespace {

// node-addon-api has no way from a napi_value to its v8::BackingStore. A napi_value is a
// v8::Local<v8::Value> in Node's implementation (v8impl::V8LocalValueFromJsValue does this same
// copy); the static_assert guards the one assumption.
v8::Local<v8::Value> ToV8(napi_value value) {
  v8::Local<v8::Value> local;
  static_assert(sizeof local == sizeof value, "napi_value is a v8::Local");
  std::memcpy(static_cast<void*>(&local), &value, sizeof value);
  return local;
}

// One allocate()'s memory. Its ArrayBuffer's finalizer (Node runs it from a SetImmediate after the
// store's last share goes) frees it, unless free() did already: free() releases at once memory
// nothing else holds, so that a loop that never lets the event loop turn does not pile it up. The
// finalizer always runs, and deletes this record.
struct Allocation {
  void* data;
  bool freed = false;
};

// Allocations of this process whose memory is still alive, so that free() detaches only memory it
// handed out. Process-wide: finalizers may run at environment teardown, after instance data.
std::mutex allocations_mutex;
std::unordered_map<void*, Allocation*> allocations;

// The memory goes now, if it has not: under the lock, so that an address posix_memalign hands out
// again is never taken for the old allocation.
void FreeOnce(Allocation* allocation) {
  std::lock_guard<std::mutex> lock(allocations_mutex);
  if (allocation->freed) return;
  allocation->freed = true;
  allocations.erase(allocation->data);
  std::free(allocation->data);
}

void Finalize(Allocation* allocation) {
  FreeOnce(allocation);
  delete allocation;
}

Allocation* AllocationAt(void* data) {
  std::lock_guard<std::mutex> lock(allocations_mutex);
  auto found = allocations.find(data);
  return found == allocations.end() ? nullptr : found->second;
}

// Mappings from mapFile() that are still mapped, for munmap and unmapFile().
struct Mapping {
  std::size_t size;
  // A character device (a device DAX) is the memory itself: there is nothing for msync to write
  // back, and it refuses (EINVAL).
  bool device;
};
std::mutex mappings_mutex;
std::unordered_map<void*, Mapping> mappings;

void Unmap(void* data) {
  std::size_t size = 0;
  {
    std::lock_guard<std::mutex> lock(mappings_mutex);
    auto found = mappings.find(data);
    if (found == mappings.end()) return;
    size = found->second.size;
    mappings.erase(found);
  }
  munmap(data, size);
}

// A mapFile() failure: `errno` (0 for a refusal of the arguments) and the `reason` core reports
// for what the addon itself checked ("SizeZero", "Unaligned", "OutOfRange", "NotMappable").
Napi::Value Refuse(Napi::Env env, const char* operation, int error, const char* reason, const std::string& detail) {
  Call call(env, operation, Domain::Errno);
  call.Fail(error == 0 ? EINVAL : error, detail);
  bool pending = false;
  if (reason != nullptr && napi_is_exception_pending(env, &pending) == napi_ok && pending) {
    napi_value thrown = nullptr;
    napi_get_and_clear_last_exception(env, &thrown);
    Napi::Object object(env, thrown);
    object.Set("reason", Napi::String::New(env, reason));
    napi_throw(env, thrown);
  }
  return env.Undefined();
}

// Closes a descriptor when the scope ends.
struct Fd {
  int fd;
  ~Fd() {
    if (fd >= 0) close(fd);
  }
};

}  // namespace

bool ResolveBytes(const Call& call, Napi::Value value, Bytes* out) {
  if (value.IsNull() || value.IsUndefined()) return call.Invalid("memory is NULL"), false;
  if (!value.IsTypedArray() || value.As<Napi::TypedArray>().TypedArrayType() != napi_uint8_array) {
    return call.Invalid("memory must be a Uint8Array"), false;
  }
  v8::Local<v8::Uint8Array> view = ToV8(value).As<v8::Uint8Array>();
  // Buffer() moves a small on-heap typed array's bytes off the heap, so the address is stable.
  v8::Local<v8::ArrayBuffer> buffer = view->Buffer();
  if (buffer.As<v8::Value>()->IsSharedArrayBuffer()) {
    return call.Invalid("memory backed by a SharedArrayBuffer cannot be registered"), false;
  }
  if (buffer->WasDetached()) return call.Invalid("memory's ArrayBuffer is detached"), false;
  std::shared_ptr<v8::BackingStore> store = buffer->GetBackingStore();
  if (store->IsResizableByUserJavaScript()) {
    return call.Invalid("memory backed by a resizable ArrayBuffer cannot be registered"), false;
  }
  if (view->ByteLength() == 0 || store->Data() == nullptr) return call.Invalid("size is 0"), false;
  out->data = static_cast<char*>(store->Data()) + view->ByteOffset();
  out->size = view->ByteLength();
  out->owner = std::move(store);
  return true;
}

Napi::Value Allocate(const Napi::CallbackInfo& info) {
  Call call(info.Env(), "posix_memalign", Domain::Rpma);
  if (!info[0].IsNumber()) return call.Invalid("size must be a number");
  double requested = info[0].As<Napi::Number>().DoubleValue();
  if (!(requested >= 1) || requested > static_cast<double>(v8::Uint8Array::kMaxLength) ||
      requested != std::floor(requested)) {
    return call.Invalid(requested == 0 ? "size is 0" : "size must be a positive integer within a Uint8Array's limit");
  }
  std::size_t size = static_cast<std::size_t>(requested);
  void* data = nullptr;
  if (posix_memalign(&data, static_cast<std::size_t>(sysconf(_SC_PAGESIZE)), size) != 0) {
    return call.Fail(RPMA_E_NOMEM, "cannot allocate " + std::to_string(size) + " page-aligned bytes");
  }
  std::memset(data, 0, size);
  auto* allocation = new Allocation{data};
  {
    std::lock_guard<std::mutex> lock(allocations_mutex);
    allocations[data] = allocation;
  }
  // Runs when the store's last share goes: after free() or GC, and after every registration.
  Napi::ArrayBuffer buffer = Napi::ArrayBuffer::New(
      info.Env(), data, size, [](Napi::Env, void*, Allocation* hint) { Finalize(hint); }, allocation);
  return Napi::Uint8Array::New(info.Env(), size, buffer, 0);
}

Napi::Value Free(const Napi::CallbackInfo& info) {
  Call call(info.Env(), "free", Domain::Rpma);
  if (!info[0].IsTypedArray()) return call.Invalid("memory must be a Uint8Array from allocate()");
  // allocate() never hands out a SharedArrayBuffer, and node-addon-api's ArrayBuffer calls abort on one.
  if (ToV8(info[0]).As<v8::TypedArray>()->Buffer().As<v8::Value>()->IsSharedArrayBuffer()) {
    return call.Invalid("memory was not allocated by allocate() (it is backed by a SharedArrayBuffer)");
  }
  Napi::ArrayBuffer buffer = info[0].As<Napi::TypedArray>().ArrayBuffer();
  if (buffer.IsDetached()) return info.Env().Undefined();  // freed already, or transferred away
  Allocation* allocation = AllocationAt(buffer.Data());
  if (allocation == nullptr) return call.Invalid("memory was not allocated by allocate()");
  std::shared_ptr<v8::BackingStore> store = ToV8(buffer).As<v8::ArrayBuffer>()->GetBackingStore();
  // Detaching drops the ArrayBuffer's share. A registration holds one of its own: then the memory
  // goes when the last of them drops it (the finalizer); with none, now.
  buffer.Detach();
  if (store.use_count() == 1) FreeOnce(allocation);
  return info.Env().Undefined();
}

Napi::Value LiveAllocations(const Napi::CallbackInfo& info) {
  std::lock_guard<std::mutex> lock(allocations_mutex);
  return Napi::Number::New(info.Env(), static_cast<double>(allocations.size()));
}

Napi::Value MapFile(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (!info[0].IsString()) return Refuse(env, "open", EINVAL, nullptr, "path must be a string");
  std::string path = info[0].As<Napi::String>().Utf8Value();
  if (path.empty() || path.find('\0') != std::string::npos) {
    return Refuse(env, "open", EINVAL, nullptr, "path must be a non-empty string without NUL");
  }
  const double page = static_cast<double>(sysconf(_SC_PAGESIZE));
  const double max = static_cast<double>(v8::Uint8Array::kMaxLength);
  double offset = info[1].IsNumber() ? info[1].As<Napi::Number>().DoubleValue() : -1;
  if (!(offset >= 0) || offset != std::floor(offset) || offset > 9007199254740991.0) {
    return Refuse(env, "mmap", EINVAL, nullptr, "offset must be a non-negative integer");
  }
  if (std::fmod(offset, page) != 0) {
    return Refuse(env, "mmap", EINVAL, "Unaligned", "offset must be a multiple of the page size");
  }
  bool sized = !info[2].IsUndefined();
  double requested = sized && info[2].IsNumber() ? info[2].As<Napi::Number>().DoubleValue() : -1;
  if (sized && (!(requested >= 0) || requested != std::floor(requested))) {
    return Refuse(env, "mmap", EINVAL, nullptr, "size must be a non-negative integer");
  }
  if (sized && requested == 0) return Refuse(env, "mmap", EINVAL, "SizeZero", "size is 0");
  // Before anything is opened or created: a refusal leaves no file behind.
  if (sized && requested > max) return Refuse(env, "mmap", EINVAL, "OutOfRange", "size exceeds a Uint8Array's limit");
  bool create = info[3].IsBoolean() && info[3].As<Napi::Boolean>().Value();
  if (create && !sized) return Refuse(env, "open", EINVAL, "SizeZero", "a file to create needs a size");

  bool created = false;
  Fd fd{-1};
  if (create) {
    fd.fd = open(path.c_str(), O_RDWR | O_CLOEXEC | O_CREAT | O_EXCL, 0600);
    created = fd.fd >= 0;
  }
  if (fd.fd < 0) fd.fd = open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd.fd < 0) {
    int error = errno;
    return Refuse(env, "open", error, error == EISDIR ? "NotMappable" : nullptr, "cannot open " + path + " to read and write");
  }
  struct stat st;
  if (fstat(fd.fd, &st) != 0) return Refuse(env, "fstat", errno, nullptr, path);
  bool regular = S_ISREG(st.st_mode);
  if (!regular && !S_ISCHR(st.st_mode) && !S_ISBLK(st.st_mode)) {
    return Refuse(env, "mmap", ENODEV, "NotMappable", path + " is neither a regular file nor a device");
  }
  double length = requested;
  if (regular) {
    double end = static_cast<double>(st.st_size);
    if (created) {
      if (ftruncate(fd.fd, static_cast<off_t>(offset + requested)) != 0) {
        int error = errno;
        unlink(path.c_str());
        return Refuse(env, "ftruncate", error, nullptr, "cannot size the new file " + path);
      }
    } else if (!sized) {
      if (end == 0) return Refuse(env, "mmap", EINVAL, "SizeZero", path + " is empty");
      if (offset >= end) {
        return Refuse(env, "mmap", EINVAL, "OutOfRange",
                      path + " holds " + std::to_string(st.st_size) + " bytes, not more than the offset");
      }
      length = end - offset;
    } else if (offset + requested > end) {
      return Refuse(env, "mmap", EINVAL, "OutOfRange",
                    path + " holds " + std::to_string(st.st_size) + " bytes, fewer than offset + size");
    }
  } else if (!sized) {
    return Refuse(env, "mmap", EINVAL, "SizeZero", path + " is a device, whose size stat does not tell");
  }
  if (length > max) return Refuse(env, "mmap", EINVAL, "OutOfRange", "size exceeds a Uint8Array's limit");
  std::size_t size = static_cast<std::size_t>(length);
  void* data = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd.fd, static_cast<off_t>(offset));
  if (data == MAP_FAILED) {
    int error = errno;
    if (created) unlink(path.c_str());
    // A device DAX maps in units of its alignment (2 MiB by default), and says EINVAL otherwise.
    const char* reason = error == EINVAL && !regular ? "Unaligned" : error == ENODEV ? "NotMappable" : nullptr;
    return Refuse(env, "mmap", error, reason, path);
  }
  {
    std::lock_guard<std::mutex> lock(mappings_mutex);
    mappings.emplace(data, Mapping{size, S_ISCHR(st.st_mode)});
  }
  // munmap runs when the store's last share goes: after unmapFile() or GC, and after every
  // registration over the mapping.
  Napi::ArrayBuffer buffer = Napi::ArrayBuffer::New(env, data, size, [](Napi::Env, void* d) { Unmap(d); });
  return Napi::Uint8Array::New(env, size, buffer, 0);
}

Napi::Value UnmapFile(const Napi::CallbackInfo& info) {
  Call call(info.Env(), "munmap", Domain::Errno);
  if (!info[0].IsTypedArray()) return call.Invalid("memory must be a Uint8Array from mapFile()");
  if (ToV8(info[0]).As<v8::TypedArray>()->Buffer().As<v8::Value>()->IsSharedArrayBuffer()) {
    return call.Invalid("memory was not mapped by mapFile() (it is backed by a SharedArrayBuffer)");
  }
  Napi::ArrayBuffer buffer = info[0].As<Napi::TypedArray>().ArrayBuffer();
  if (buffer.IsDetached()) return info.Env().Undefined();  // unmapped already
  void* data = buffer.Data();
  Mapping mapping{0, false};
  {
    std::lock_guard<std::mutex> lock(mappings_mutex);
    auto found = mappings.find(data);
    if (found == mappings.end()) return call.Invalid("memory was not mapped by mapFile()");
    mapping = found->second;
  }
  int synced = mapping.device ? 0 : msync(data, mapping.size, MS_SYNC);
  int error = errno;
  // Unmapped whatever msync said: JavaScript loses the bytes now, munmap follows when the last
  // registration lets go of them.
  buffer.Detach();
  if (synced != 0) return Refuse(info.Env(), "msync", error, nullptr, "the mapping's writes may not have reached the file");
  return info.Env().Undefined();
}

Napi::Value LiveMappings(const Napi::CallbackInfo& info) {
  std::lock_guard<std::mutex> lock(mappings_mutex);
  return Napi::Number::New(info.Env(), static_cast<double>(mappings.size()));
}

}  // namespace rdma
