// Local registrations (rpma_mr_reg and friends) and remote ones (rpma_mr_remote_*).
#include <librpma.h>
#include <napi.h>

#include <cmath>
#include <mutex>
#include <string>

#include "errors.h"
#include "handles.h"
#include "memory.h"

namespace rdma {

namespace {

// rpma_mr_reg and rpma_mr_dereg are not thread-safe, and worker_threads may each load the addon.
std::mutex registration_mutex;

constexpr int kUsageAll = 0xff;  // USAGE_ALL_ALLOWED in librpma's mr.c

}  // namespace

int MrLocalState::Dereg() {
  if (mr == nullptr) return 0;
  int code;
  {
    std::lock_guard<std::mutex> lock(registration_mutex);
    code = rpma_mr_dereg(&mr);
  }
  mr = nullptr;  // librpma frees it even on failure
  Count(Kind::MrLocal, -1);
  if (code != 0) Quarantine(memory);
  memory.reset();
  if (peer) peer->regions--;
  peer.reset();
  return code;
}

namespace {

Napi::Value MrReg(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Call call(env, "rpma_mr_reg", Domain::Rpma);
  Peer* peer = Open<Peer>(call, info[0]);
  if (peer == nullptr) return env.Undefined();
  Bytes bytes;
  if (!ResolveBytes(call, info[1], &bytes)) return env.Undefined();
  if (!info[2].IsNumber()) return call.Invalid("usage must be a number");
  double usage = info[2].As<Napi::Number>().DoubleValue();
  if (usage != std::floor(usage) || usage < 0 || usage > kUsageAll) {
    return call.Invalid("usage has bits outside RPMA_MR_USAGE_* (0xff)");
  }
  if (usage == 0) return call.Invalid("usage is 0");

  rpma_mr_local* mr = nullptr;
  int code;
  std::string log;
  {
    std::lock_guard<std::mutex> lock(registration_mutex);
    ClearLog();
    code = rpma_mr_reg(peer->state->peer, bytes.data, bytes.size, static_cast<int>(usage), &mr);
    log = TakeLog();
  }
  // A memlock failure comes back as RPMA_E_PROVIDER with the errno only in librpma's log.
  if (code == RPMA_E_PROVIDER) {
    bool enomem = log.find("Cannot allocate memory") != std::string::npos || log.find("ENOMEM") != std::string::npos;
    return call.Fail(code, Join(enomem ? MemlockHintAfterEnomem(bytes.size) : MemlockHint(bytes.size), log));
  }
  if (code != 0) return call.Fail(code, log);

  MrLocal* handle;
  Napi::Object object = MrLocal::New(env, &handle);
  if (handle == nullptr) {
    {
      std::lock_guard<std::mutex> lock(registration_mutex);
      rpma_mr_dereg(&mr);
    }
    return call.Fail(RPMA_E_NOMEM, "cannot make a handle for the region; it is deregistered");
  }
  handle->state = std::make_shared<MrLocalState>();
  handle->state->mr = mr;
  handle->state->peer = peer->state;
  handle->state->memory = std::move(bytes.owner);
  peer->state->regions++;
  Count(Kind::MrLocal, +1);
  return object;
}

Napi::Value MrDereg(const Napi::CallbackInfo& info) {
  Call call(info.Env(), "rpma_mr_dereg", Domain::Rpma);
  MrLocal* handle = Open<MrLocal>(call, info[0]);
  if (handle == nullptr) return info.Env().Undefined();
  std::size_t in_flight = handle->state->in_flight;
  // The device may still read or write it: refuse, and leave the region usable.
  if (in_flight != 0) {
    return call.InUse(std::to_string(in_flight) +
                        (in_flight == 1 ? " request in flight uses" : " requests in flight use") +
                        " this region: wait for their completions (or delete the connection) first");
  }
  ClearLog();
  int code = handle->state->Dereg();
  std::string log = TakeLog();
  if (code != 0) return call.Fail(code, Join(log, "the handle is gone; its memory is kept for the life of the process"));
  return info.Env().Undefined();
}

Napi::Value MrGetDescriptorSize(const Napi::CallbackInfo& info) {
  Call call(info.Env(), "rpma_mr_get_descriptor_size", Domain::Rpma);
  MrLocal* handle = Open<MrLocal>(call, info[0]);
  if (handle == nullptr) return info.Env().Undefined();
  size_t size = 0;
  int code = rpma_mr_get_descriptor_size(handle->state->mr, &size);
  if (code != 0) return call.Fail(code);
  return Napi::Number::New(info.Env(), static_cast<double>(size));
}

Napi::Value MrGetDescriptor(const Napi::CallbackInfo& info) {
  Call call(info.Env(), "rpma_mr_get_descriptor", Domain::Rpma);
  MrLocal* handle = Open<MrLocal>(call, info[0]);
  if (handle == nullptr) return info.Env().Undefined();
  size_t size = 0;
  int code = rpma_mr_get_descriptor_size(handle->state->mr, &size);
  if (code != 0) return call.Fail(code);
  Napi::Uint8Array descriptor = Napi::Uint8Array::New(info.Env(), size);
  code = rpma_mr_get_descriptor(handle->state->mr, descriptor.Data());
  if (code != 0) return call.Fail(code);
  return descriptor;
}

Napi::Value MrGetPtr(const Napi::CallbackInfo& info) {
  Call call(info.Env(), "rpma_mr_get_ptr", Domain::Rpma);
  MrLocal* handle = Open<MrLocal>(call, info[0]);
  if (handle == nullptr) return info.Env().Undefined();
  void* ptr = nullptr;
  int code = rpma_mr_get_ptr(handle->state->mr, &ptr);
  if (code != 0) return call.Fail(code);
  return Napi::BigInt::New(info.Env(), static_cast<uint64_t>(reinterpret_cast<uintptr_t>(ptr)));
}

Napi::Value MrGetSize(const Napi::CallbackInfo& info) {
  Call call(info.Env(), "rpma_mr_get_size", Domain::Rpma);
  MrLocal* handle = Open<MrLocal>(call, info[0]);
  if (handle == nullptr) return info.Env().Undefined();
  size_t size = 0;
  int code = rpma_mr_get_size(handle->state->mr, &size);
  if (code != 0) return call.Fail(code);
  return Napi::Number::New(info.Env(), static_cast<double>(size));
}

Napi::Value MrRemoteFromDescriptor(const Napi::CallbackInfo& info) {
  Call call(info.Env(), "rpma_mr_remote_from_descriptor", Domain::Rpma);
  if (info[0].IsNull() || info[0].IsUndefined()) return call.Invalid("desc is NULL");
  if (!info[0].IsTypedArray() || info[0].As<Napi::TypedArray>().TypedArrayType() != napi_uint8_array) {
    return call.Invalid("desc must be a Uint8Array");
  }
  // Every other check is librpma's own: the differential test compares it with core's codec.
  Napi::Uint8Array desc = info[0].As<Napi::Uint8Array>();
  rpma_mr_remote* mr = nullptr;
  ClearLog();
  int code = rpma_mr_remote_from_descriptor(desc.Data(), desc.ByteLength(), &mr);
  std::string log = TakeLog();
  if (code != 0) return call.Fail(code, log);
  MrRemote* handle;
  Napi::Object object = MrRemote::New(info.Env(), &handle);
  if (handle == nullptr) {
    rpma_mr_remote_delete(&mr);
    return call.Fail(RPMA_E_NOMEM, "cannot make a handle for the remote region; it is deleted");
  }
  handle->mr = mr;
  Count(Kind::MrRemote, +1);
  return object;
}

Napi::Value MrRemoteDelete(const Napi::CallbackInfo& info) {
  Call call(info.Env(), "rpma_mr_remote_delete", Domain::Rpma);
  MrRemote* handle = Open<MrRemote>(call, info[0]);
  if (handle == nullptr) return info.Env().Undefined();
  int code = rpma_mr_remote_delete(&handle->mr);
  handle->mr = nullptr;
  Count(Kind::MrRemote, -1);
  if (code != 0) return call.Fail(code);
  return info.Env().Undefined();
}

Napi::Value MrRemoteGetSize(const Napi::CallbackInfo& info) {
  Call call(info.Env(), "rpma_mr_remote_get_size", Domain::Rpma);
  MrRemote* handle = Open<MrRemote>(call, info[0]);
  if (handle == nullptr) return info.Env().Undefined();
  size_t size = 0;
  int code = rpma_mr_remote_get_size(handle->mr, &size);
  if (code != 0) return call.Fail(code);
  return Napi::BigInt::New(info.Env(), static_cast<uint64_t>(size));
}

Napi::Value MrRemoteGetFlushType(const Napi::CallbackInfo& info) {
  Call call(info.Env(), "rpma_mr_remote_get_flush_type", Domain::Rpma);
  MrRemote* handle = Open<MrRemote>(call, info[0]);
  if (handle == nullptr) return info.Env().Undefined();
  int flush_type = 0;
  int code = rpma_mr_remote_get_flush_type(handle->mr, &flush_type);
  if (code != 0) return call.Fail(code);
  return Napi::Number::New(info.Env(), flush_type);
}

}  // namespace

void RegisterMr(Napi::Env env, Napi::Object exports) {
  exports.Set("mrReg", Napi::Function::New(env, MrReg, "mrReg"));
  exports.Set("mrDereg", Napi::Function::New(env, MrDereg, "mrDereg"));
  exports.Set("mrGetDescriptorSize", Napi::Function::New(env, MrGetDescriptorSize, "mrGetDescriptorSize"));
  exports.Set("mrGetDescriptor", Napi::Function::New(env, MrGetDescriptor, "mrGetDescriptor"));
  exports.Set("mrGetPtr", Napi::Function::New(env, MrGetPtr, "mrGetPtr"));
  exports.Set("mrGetSize", Napi::Function::New(env, MrGetSize, "mrGetSize"));
  exports.Set("mrRemoteFromDescriptor", Napi::Function::New(env, MrRemoteFromDescriptor, "mrRemoteFromDescriptor"));
  exports.Set("mrRemoteDelete", Napi::Function::New(env, MrRemoteDelete, "mrRemoteDelete"));
  exports.Set("mrRemoteGetSize", Napi::Function::New(env, MrRemoteGetSize, "mrRemoteGetSize"));
  exports.Set("mrRemoteGetFlushType", Napi::Function::New(env, MrRemoteGetFlushType, "mrRemoteGetFlushType"));
}

}  // namespace rdma
