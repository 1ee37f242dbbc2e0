// Local registrations (rpma_mr_reg and friends) and remote ones (rpma_mr_remote_*).
#include <librpma.h>
#include <napi.h>

#include <cmath>
#include <mutex>
#include <string>

#include "async_work.h"
#include "errors.h"
#include "handles.h"
#include "conn_common.h"
#include "memory.h"

namespace rdma {

namespace {

// rpma_mr_reg and rpma_mr_dereg are not thread-safe, and worker_threads may each load the addon.
std::mutex registration_mutex;

constexpr int kUsageAll = 0xff;  // USAGE_ALL_ALLOWED in librpma's mr.c

// rpma_mr_dereg, serialised with every registration of the process; its log in `log`. Any thread.
int Deregister(rpma_mr_local** mr, std::string* log) {
  std::lock_guard<std::mutex> lock(registration_mutex);
  ClearLog();
  int code = rpma_mr_dereg(mr);
  *log = TakeLog();
  *mr = nullptr;  // librpma frees it even on failure
  return code;
}

}  // namespace

int MrLocalState::Dereg() {
  if (mr == nullptr) return 0;
  std::string log;
  return Released(Deregister(&mr, &log));
}

int MrLocalState::Released(int code) {
  Count(Kind::MrLocal, -1);
  if (code != 0) Quarantine(memory);
  memory.reset();
  if (peer) peer->regions--;
  peer.reset();
  return code;
}

namespace {

// What rpma_mr_reg needs, read from its JavaScript arguments (throws through `call` and returns
// false on a bad one).
struct RegArgs {
  std::shared_ptr<PeerState> peer;
  Bytes bytes;
  int usage = 0;
};

bool ReadRegArgs(const Call& call, const Napi::CallbackInfo& info, RegArgs* out) {
  Peer* peer = Open<Peer>(call, info[0]);
  if (peer == nullptr) return false;
  if (!ResolveBytes(call, info[1], &out->bytes)) return false;
  if (!info[2].IsNumber()) return call.Invalid("usage must be a number"), false;
  double usage = info[2].As<Napi::Number>().DoubleValue();
  if (usage != std::floor(usage) || usage < 0 || usage > kUsageAll) {
    return call.Invalid("usage has bits outside RPMA_MR_USAGE_* (0xff)"), false;
  }
  if (usage == 0) return call.Invalid("usage is 0"), false;
  out->peer = peer->state;
  out->usage = static_cast<int>(usage);
  return true;
}

// rpma_mr_reg itself, serialised with every other registration of the process. Any thread.
int Register(const RegArgs& args, rpma_mr_local** mr, std::string* log) {
  std::lock_guard<std::mutex> lock(registration_mutex);
  ClearLog();
  int code = rpma_mr_reg(args.peer->peer, args.bytes.data, args.bytes.size, args.usage, mr);
  *log = TakeLog();
  return code;
}

// The detail of a failed registration: a memlock failure comes back as RPMA_E_PROVIDER with the
// errno only in librpma's log.
std::string RegFailure(int code, const RegArgs& args, const std::string& log) {
  if (code != RPMA_E_PROVIDER) return log;
  bool enomem = log.find("Cannot allocate memory") != std::string::npos || log.find("ENOMEM") != std::string::npos;
  return Join(enomem ? MemlockHintAfterEnomem(args.bytes.size) : MemlockHint(args.bytes.size), log);
}

// The handle of a new registration, or an empty object (the registration given back) when no
// handle can be made.
Napi::Object Wrap(Napi::Env env, RegArgs& args, rpma_mr_local* mr) {
  MrLocal* handle;
  Napi::Object object = MrLocal::New(env, &handle);
  if (handle == nullptr) {
    std::lock_guard<std::mutex> lock(registration_mutex);
    rpma_mr_dereg(&mr);
    return Napi::Object();
  }
  handle->state = std::make_shared<MrLocalState>();
  handle->state->mr = mr;
  handle->state->peer = args.peer;
  handle->state->memory = std::move(args.bytes.owner);
  args.peer->regions++;
  Count(Kind::MrLocal, +1);
  return object;
}

// What mrReg gives JavaScript: { handle, address } (rpma_mr_get_ptr, read here so that a
// registration is one call).
Napi::Value Registered(Napi::Env env, Napi::Object handle, rpma_mr_local* mr) {
  void* ptr = nullptr;
  rpma_mr_get_ptr(mr, &ptr);  // cannot fail for a live registration
  Napi::Object result = Napi::Object::New(env);
  result.Set("handle", handle);
  result.Set("address", Napi::BigInt::New(env, static_cast<uint64_t>(reinterpret_cast<uintptr_t>(ptr))));
  return result;
}

Napi::Value MrReg(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Call call(env, "rpma_mr_reg", Domain::Rpma);
  RegArgs args;
  if (!ReadRegArgs(call, info, &args)) return env.Undefined();
  rpma_mr_local* mr = nullptr;
  std::string log;
  int code = Register(args, &mr, &log);
  if (code != 0) return call.Fail(code, RegFailure(code, args, log));
  Napi::Object object = Wrap(env, args, mr);
  if (object.IsEmpty()) return call.Fail(RPMA_E_NOMEM, "cannot make a handle for the region; it is deregistered");
  return Registered(env, object, mr);
}

// rpma_mr_reg on a worker thread: pinning hundreds of megabytes takes hundreds of milliseconds,
// which the event loop must not wait out. The peer counts it as a user and the memory's backing
// store is held until it ends, whatever JavaScript does meanwhile.
class MrRegJob {
 public:
  explicit MrRegJob(RegArgs args) : args_(std::move(args)) { args_.peer->users++; }
  MrRegJob(const MrRegJob&) = delete;
  MrRegJob& operator=(const MrRegJob&) = delete;

  ~MrRegJob() {
    if (mr_ != nullptr) {  // never handed over (the environment went away)
      std::lock_guard<std::mutex> lock(registration_mutex);
      rpma_mr_dereg(&mr_);
    }
    args_.peer->users--;
  }

  void Run() { code_ = Register(args_, &mr_, &log_); }

  Outcome Settle(Napi::Env env) {
    if (code_ != 0) {
      return Outcome::Reject(conn::RpmaErrorValue(env, code_, "rpma_mr_reg", RegFailure(code_, args_, log_)));
    }
    rpma_mr_local* mr = mr_;
    mr_ = nullptr;
    Napi::Object object = Wrap(env, args_, mr);  // deregisters if it fails
    if (object.IsEmpty()) return Outcome::Unmade("cannot make a handle for the region; it is deregistered");
    return Outcome::Resolve(Registered(env, object, mr));
  }

 private:
  RegArgs args_;
  rpma_mr_local* mr_ = nullptr;
  int code_ = 0;
  std::string log_;
};

Napi::Value MrRegAsync(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Call call(env, "rpma_mr_reg", Domain::Rpma);
  RegArgs args;
  if (!ReadRegArgs(call, info, &args)) return env.Undefined();
  return QueueWork<MrRegJob>(env, "rpma_mr_reg", std::move(args));
}

constexpr const char* kDeregFailed = "the handle is gone; its memory is kept for the life of the process";

// The region to deregister, or null (thrown through `call`) when it is closed or still in use.
MrLocal* OpenForDereg(const Call& call, const Napi::CallbackInfo& info) {
  MrLocal* handle = Open<MrLocal>(call, info[0]);
  if (handle == nullptr) return nullptr;
  std::size_t in_flight = handle->state->in_flight;
  // The device may still read or write it: refuse, and leave the region usable.
  if (in_flight != 0) {
    call.InUse(std::to_string(in_flight) + (in_flight == 1 ? " request in flight uses" : " requests in flight use") +
               " this region: wait for their completions (or delete the connection) first");
    return nullptr;
  }
  return handle;
}

Napi::Value MrDereg(const Napi::CallbackInfo& info) {
  Call call(info.Env(), "rpma_mr_dereg", Domain::Rpma);
  MrLocal* handle = OpenForDereg(call, info);
  if (handle == nullptr) return info.Env().Undefined();
  MrLocalState& state = *handle->state;
  std::string log;
  int code = state.Released(Deregister(&state.mr, &log));
  // Let go of the state now, not when the handle's finalizer runs: Node queues finalizers to a
  // later event-loop turn, and a loop that registers without yielding piles them up.
  handle->state.reset();
  if (code != 0) return call.Fail(code, Join(log, kDeregFailed));
  return info.Env().Undefined();
}

// rpma_mr_dereg on a worker thread: unpinning hundreds of megabytes takes as long as pinning them.
// The handle reads as deregistered at once (no new request can name it); the peer counts the
// region until the worker is done, and the bookkeeping runs back on the JavaScript thread.
class MrDeregJob {
 public:
  explicit MrDeregJob(std::shared_ptr<MrLocalState> state) : state_(std::move(state)), mr_(state_->mr) {
    state_->mr = nullptr;
  }
  MrDeregJob(const MrDeregJob&) = delete;
  MrDeregJob& operator=(const MrDeregJob&) = delete;

  ~MrDeregJob() {
    if (settled_) return;  // never settled (the environment went away, or it never ran): finish here
    if (mr_ != nullptr) code_ = Deregister(&mr_, &log_);
    state_->Released(code_);
  }

  void Run() { code_ = Deregister(&mr_, &log_); }

  Outcome Settle(Napi::Env env) {
    settled_ = true;
    state_->Released(code_);
    if (code_ != 0) {
      return Outcome::Reject(conn::RpmaErrorValue(env, code_, "rpma_mr_dereg", Join(log_, kDeregFailed)));
    }
    return Outcome::Resolve(env.Undefined());
  }

 private:
  std::shared_ptr<MrLocalState> state_;
  rpma_mr_local* mr_;
  int code_ = 0;
  std::string log_;
  bool settled_ = false;
};

Napi::Value MrDeregAsync(const Napi::CallbackInfo& info) {
  Call call(info.Env(), "rpma_mr_dereg", Domain::Rpma);
  MrLocal* handle = OpenForDereg(call, info);
  if (handle == nullptr) return info.Env().Undefined();
  return QueueWork<MrDeregJob>(info.Env(), "rpma_mr_dereg", std::move(handle->state));
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
  exports.Set("mrRegAsync", Napi::Function::New(env, MrRegAsync, "mrRegAsync"));
  exports.Set("mrDereg", Napi::Function::New(env, MrDereg, "mrDereg"));
  exports.Set("mrDeregAsync", Napi::Function::New(env, MrDeregAsync, "mrDeregAsync"));
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
