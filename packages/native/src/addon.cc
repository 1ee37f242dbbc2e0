// @effect-rdma/native's addon: a thin layer over librpma and librdmacm. It converts arguments,
// calls C, and returns results or the library's codes; policy lives in TypeScript.
#include <napi.h>

#include <atomic>
#if defined(__GLIBC__)
#include <malloc.h>
#endif
#include <mutex>
#include <vector>

#include "errors.h"
#include "cm_ep.h"
#include "handles.h"
#include "memory.h"
#include "private_data.h"

namespace rdma {

namespace {

// Random, fixed per kind: a handle of one kind never passes for another.
const napi_type_tag kTags[static_cast<int>(Kind::Count)] = {
    {0x8d6f1c3e2b7a4f01ULL, 0x9e2c4b7d1a3f5e60ULL},  // IbvContext
    {0x1b9e7d3c5a2f4e02ULL, 0x7c3a5e1d9b2f4a61ULL},  // Peer
    {0x4e2a9c7b1d5f3e03ULL, 0x2d8b6f4a1c9e3b62ULL},  // MrLocal
    {0x6c1d8e4a2f7b5a04ULL, 0x5a9e3c7d2b1f6e63ULL},  // MrRemote
    {0x9a3e5c1f7d2b4a06ULL, 0x1e6c9a4d7b3f5c65ULL},  // CmMr
    {0x5d2b8f6e3a1c7d07ULL, 0x6f1a8c3e5d9b2a66ULL},  // Endpoint
    {0x2c7e4a9f1b6d3e08ULL, 0x3a5d7f1c9e2b8d67ULL},  // ConnReq
    {0x7b4f1d3a9c5e2f09ULL, 0x9c2e6a4f1d7b3e68ULL},  // Conn
    {0xe35a7c2d9f4b1a0aULL, 0x4b7e2d9a6c1f3e69ULL},  // Srq
    {0x61c9e2a74d3b8f0bULL, 0xd2a45e7c19b36f6aULL},  // CmEp
    {0xa84f3d1e6b92c70cULL, 0x37e1c9a5f24d8b6bULL},  // CmListener
};

const char* const kNames[static_cast<int>(Kind::Count)] = {"ibv_context", "peer",   "mr_local", "mr_remote",
                                                           "cm_mr",       "endpoint", "conn_req", "conn",
                                                           "srq",         "cm_ep",  "cm_listener"};

}  // namespace

const char* KindName(Kind kind) { return kNames[static_cast<int>(kind)]; }
const napi_type_tag* TypeTag(Kind kind) { return &kTags[static_cast<int>(kind)]; }

bool KindOf(Napi::Value value, Kind* kind) {
  if (!value.IsObject()) return false;
  Napi::Object object = value.As<Napi::Object>();
  for (int i = 0; i < static_cast<int>(Kind::Count); i++) {
    if (object.CheckTypeTag(&kTags[i])) {
      *kind = static_cast<Kind>(i);
      return true;
    }
  }
  return false;
}

namespace {
std::atomic<long> live[static_cast<int>(Kind::Count)];
}  // namespace

void Count(Kind kind, int delta) { live[static_cast<int>(kind)] += delta; }

Napi::Value LiveHandles(const Napi::CallbackInfo& info) {
  auto get = [](Kind kind) { return static_cast<double>(live[static_cast<int>(kind)].load()); };
  Napi::Object result = Napi::Object::New(info.Env());
  result.Set("peers", get(Kind::Peer));
  result.Set("localRegions", get(Kind::MrLocal));
  result.Set("remoteRegions", get(Kind::MrRemote));
  result.Set("cmRegions", get(Kind::CmMr));
  result.Set("endpoints", get(Kind::Endpoint));
  result.Set("connectionRequests", get(Kind::ConnReq));
  result.Set("connections", get(Kind::Conn));
  result.Set("sharedReceiveQueues", get(Kind::Srq));
  result.Set("cmEndpoints", get(Kind::CmEp));
  result.Set("cmListeners", get(Kind::CmListener));
  return result;
}

void Quarantine(std::shared_ptr<v8::BackingStore> memory) {
  // Never destroyed: exit must not run BackingStore destructors after V8 is gone.
  static std::mutex mutex;
  static auto* kept = new std::vector<std::shared_ptr<v8::BackingStore>>();
  if (!memory) return;
  std::lock_guard<std::mutex> lock(mutex);
  kept->push_back(std::move(memory));
}

namespace {

Napi::Value InstallLogCaptureJs(const Napi::CallbackInfo& info) {
  InstallLogCapture();
  return info.Env().Undefined();
}

// Bytes the process holds from malloc, in use (glibc: every arena's in-use chunks plus its mmapped
// blocks); undefined elsewhere. For leak tests: unlike the resident set, it does not move with
// how much of the V8 heap is committed or how fragmented the arenas are.
Napi::Value MallocInUse(const Napi::CallbackInfo& info) {
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 33))
  struct mallinfo2 stats = mallinfo2();
  return Napi::Number::New(info.Env(), static_cast<double>(stats.uordblks + stats.hblkhd));
#else
  return info.Env().Undefined();
#endif
}

Napi::Object Init(Napi::Env env, Napi::Object exports) {
  auto* module = new Module();
  env.SetInstanceData(module);  // deleted with the environment
  module->keys = MakeKeys(env);
  IbvContext::Define(env, module);
  Peer::Define(env, module);
  MrLocal::Define(env, module);
  MrRemote::Define(env, module);
  CmMr::Define(env, module);
  Endpoint::Define(env, module);
  ConnReq::Define(env, module);
  Conn::Define(env, module);
  Srq::Define(env, module);
  CmEp::Define(env, module);
  CmListener::Define(env, module);
  module->polls = PollSet::Create(env);

  Napi::Object limits = Napi::Object::New(env);
  limits.Set("connect", Napi::Number::New(env, static_cast<double>(private_data::kConnectLimit)));
  limits.Set("accept", Napi::Number::New(env, static_cast<double>(private_data::kAcceptLimit)));
  limits.Set("reject", Napi::Number::New(env, static_cast<double>(private_data::kRejectLimit)));
  exports.Set("privateDataLimits", limits);
  exports.Set("installLogCapture", Napi::Function::New(env, InstallLogCaptureJs, "installLogCapture"));
  exports.Set("allocate", Napi::Function::New(env, Allocate, "allocate"));
  exports.Set("free", Napi::Function::New(env, Free, "free"));
  exports.Set("liveHandles", Napi::Function::New(env, LiveHandles, "liveHandles"));
  exports.Set("liveAllocations", Napi::Function::New(env, LiveAllocations, "liveAllocations"));
  exports.Set("mallocInUse", Napi::Function::New(env, MallocInUse, "mallocInUse"));
  exports.Set("mapFile", Napi::Function::New(env, MapFile, "mapFile"));
  exports.Set("unmapFile", Napi::Function::New(env, UnmapFile, "unmapFile"));
  exports.Set("liveMappings", Napi::Function::New(env, LiveMappings, "liveMappings"));
  RegisterPeer(env, exports);
  RegisterMr(env, exports);
  RegisterCm(env, exports);
  RegisterConn(env, exports);
  RegisterSrq(env, exports);
  RegisterCmEp(env, exports);
  RegisterSpin(env, exports);
  return exports;
}

}  // namespace

}  // namespace rdma

static Napi::Object InitAddon(Napi::Env env, Napi::Object exports) { return rdma::Init(env, exports); }

NODE_API_MODULE(rpma_addon, InitAddon)
