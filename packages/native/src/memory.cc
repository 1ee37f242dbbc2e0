#include "memory.h"

#include <librpma.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <unordered_set>

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

// Allocations of this process that are still alive, so that free() detaches only memory it
// handed out. Process-wide: finalizers may run at environment teardown, after instance data.
std::mutex allocations_mutex;
std::unordered_set<void*> allocations;

void Release(void* data) {
  {
    std::lock_guard<std::mutex> lock(allocations_mutex);
    allocations.erase(data);
  }
  std::free(data);
}

bool IsAllocation(void* data) {
  std::lock_guard<std::mutex> lock(allocations_mutex);
  return allocations.count(data) != 0;
}

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
  if (!(requested >= 1) || requested > static_cast<double>(v8::TypedArray::kMaxLength) ||
      requested != std::floor(requested)) {
    return call.Invalid(requested == 0 ? "size is 0" : "size must be a positive integer within a Uint8Array's limit");
  }
  std::size_t size = static_cast<std::size_t>(requested);
  void* data = nullptr;
  if (posix_memalign(&data, static_cast<std::size_t>(sysconf(_SC_PAGESIZE)), size) != 0) {
    return call.Fail(RPMA_E_NOMEM, "cannot allocate " + std::to_string(size) + " page-aligned bytes");
  }
  std::memset(data, 0, size);
  {
    std::lock_guard<std::mutex> lock(allocations_mutex);
    allocations.insert(data);
  }
  // Runs when the store's last share goes: after free() or GC, and after every registration.
  Napi::ArrayBuffer buffer = Napi::ArrayBuffer::New(info.Env(), data, size, [](Napi::Env, void* d) { Release(d); });
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
  if (!IsAllocation(buffer.Data())) return call.Invalid("memory was not allocated by allocate()");
  // Detaching drops the ArrayBuffer's share; the memory goes when registrations drop theirs.
  buffer.Detach();
  return info.Env().Undefined();
}

Napi::Value LiveAllocations(const Napi::CallbackInfo& info) {
  std::lock_guard<std::mutex> lock(allocations_mutex);
  return Napi::Number::New(info.Env(), static_cast<double>(allocations.size()));
}

}  // namespace rdma
