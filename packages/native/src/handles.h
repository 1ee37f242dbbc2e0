// Every native pointer reaches JavaScript inside a handle: an ObjectWrap that JavaScript cannot
// construct, tagged with its kind (napi_type_tag_object, since napi_unwrap alone does not check
// the object's type), and closed at most once. Each exported function opens its handles with
// Open<T>, which turns NULL, a wrong kind and a closed handle into the library's own "invalid
// argument" instead of a crash.
//
// Lifetimes never depend on GC order. A child holds a std::shared_ptr to its parent's native
// state, so a peer (or rdma_cm id) outlives its regions however the wrappers are collected, even
// at environment teardown when finalizers run in no particular order. The state's destructor is
// the GC backstop: explicit close (from a Scope's finalizer) is the normal path.
#pragma once

#include <infiniband/verbs.h>
#include <librpma.h>
#include <napi.h>
#include <rdma/rdma_cma.h>

#include <cstddef>
#include <memory>
#include <string>

#include "errors.h"
#include "memory.h"

namespace rdma {

enum class Kind { IbvContext, Peer, MrLocal, MrRemote, CmId, CmMr, Count };

// Names as the Driver calls them, for details such as "expected a peer, got a cm_mr".
const char* KindName(Kind kind);
const napi_type_tag* TypeTag(Kind kind);

// The constructors of every handle class, per Node environment.
struct Module {
  Napi::FunctionReference constructors[static_cast<int>(Kind::Count)];
};

// Live native objects by kind, process-wide (librpma and librdmacm state is process-wide too):
// what a leak check reads. Counted where the C object is created and where it is released,
// explicitly or by the GC backstop.
void Count(Kind kind, int delta);
Napi::Value LiveHandles(const Napi::CallbackInfo& info);

// Which kind of handle a value is, if any.
bool KindOf(Napi::Value value, Kind* kind);

template <typename T>
class Handle : public Napi::ObjectWrap<T> {
 public:
  explicit Handle(const Napi::CallbackInfo& info) : Napi::ObjectWrap<T>(info) {
    // Only New() passes the token; `new handle.constructor()` from JavaScript gets a TypeError.
    if (info.Length() != 1 || !info[0].IsExternal() || info[0].As<Napi::External<void>>().Data() != Token()) {
      Napi::TypeError::New(info.Env(), "Illegal constructor").ThrowAsJavaScriptException();
      return;
    }
    info.This().As<Napi::Object>().TypeTag(TypeTag(T::kKind));
  }

  static Napi::Function Define(Napi::Env env, Module* module) {
    Napi::Function constructor = Napi::ObjectWrap<T>::DefineClass(env, KindName(T::kKind), {});
    module->constructors[static_cast<int>(T::kKind)] = Napi::Persistent(constructor);
    return constructor;
  }

  // A new, empty wrapper; the caller fills it in through *out.
  static Napi::Object New(Napi::Env env, T** out) {
    Napi::FunctionReference& constructor = env.GetInstanceData<Module>()->constructors[static_cast<int>(T::kKind)];
    Napi::Object object = constructor.New({Napi::External<void>::New(env, Token())});
    *out = Napi::ObjectWrap<T>::Unwrap(object);
    return object;
  }

 private:
  static void* Token() {
    static char token;
    return &token;
  }
};

// Opens a handle argument, or throws through `call` and returns nullptr.
template <typename T>
T* Open(const Call& call, Napi::Value value) {
  std::string expected = KindName(T::kKind);
  if (value.IsNull() || value.IsUndefined()) return call.Invalid(expected + " is NULL"), nullptr;
  Kind kind;
  if (!KindOf(value, &kind)) return call.Invalid("expected a " + expected + " handle"), nullptr;
  if (kind != T::kKind) return call.Invalid("expected a " + expected + ", got a " + KindName(kind)), nullptr;
  T* handle = Napi::ObjectWrap<T>::Unwrap(value.As<Napi::Object>());
  if (!handle->IsOpen()) return call.Invalid("the " + expected + " was already " + T::kClosed), nullptr;
  return handle;
}

// rpma_utils_get_ibv_context's result. Owned by librdmacm's device list: nothing to release.
class IbvContext : public Handle<IbvContext> {
 public:
  static constexpr Kind kKind = Kind::IbvContext;
  static constexpr const char* kClosed = "released";
  using Handle::Handle;
  bool IsOpen() const { return context != nullptr; }
  ibv_context* context = nullptr;
};

struct PeerState {
  ~PeerState();
  rpma_peer* peer = nullptr;
  std::size_t regions = 0;
};

class Peer : public Handle<Peer> {
 public:
  static constexpr Kind kKind = Kind::Peer;
  static constexpr const char* kClosed = "deleted";
  using Handle::Handle;
  bool IsOpen() const { return state && state->peer != nullptr; }
  std::shared_ptr<PeerState> state;
};

class MrLocal : public Handle<MrLocal> {
 public:
  static constexpr Kind kKind = Kind::MrLocal;
  static constexpr const char* kClosed = "deregistered";
  using Handle::Handle;
  ~MrLocal() override { Dereg(); }
  bool IsOpen() const { return mr != nullptr; }
  // rpma_mr_dereg, once: librpma frees the handle even when it fails.
  int Dereg();
  rpma_mr_local* mr = nullptr;
  std::shared_ptr<PeerState> peer;
  std::shared_ptr<v8::BackingStore> memory;
};

class MrRemote : public Handle<MrRemote> {
 public:
  static constexpr Kind kKind = Kind::MrRemote;
  static constexpr const char* kClosed = "deleted";
  using Handle::Handle;
  ~MrRemote() override {
    if (mr == nullptr) return;
    rpma_mr_remote_delete(&mr);
    Count(kKind, -1);
  }
  bool IsOpen() const { return mr != nullptr; }
  rpma_mr_remote* mr = nullptr;
};

struct CmIdState {
  ~CmIdState();
  // rdma_dealloc_pd of ours, then rdma_destroy_ep; returns 0 or an errno.
  int Destroy();
  rdma_cm_id* id = nullptr;
  ibv_pd* pd = nullptr;        // ours, set as id->pd
  ibv_pd* bound_pd = nullptr;  // what librdmacm had put in id->pd, restored before destroying
  std::size_t regions = 0;
};

class CmId : public Handle<CmId> {
 public:
  static constexpr Kind kKind = Kind::CmId;
  static constexpr const char* kClosed = "destroyed";
  using Handle::Handle;
  bool IsOpen() const { return state && state->id != nullptr; }
  std::shared_ptr<CmIdState> state;
};

class CmMr : public Handle<CmMr> {
 public:
  static constexpr Kind kKind = Kind::CmMr;
  static constexpr const char* kClosed = "deregistered";
  using Handle::Handle;
  ~CmMr() override { Dereg(); }
  bool IsOpen() const { return mr != nullptr; }
  // rdma_dereg_mr, once; returns 0 or an errno.
  int Dereg();
  ibv_mr* mr = nullptr;
  std::shared_ptr<CmIdState> id;
  std::shared_ptr<v8::BackingStore> memory;
};

// A registration whose release failed may still be reachable by the device: keep its bytes for
// the life of the process.
void Quarantine(std::shared_ptr<v8::BackingStore> memory);

void RegisterPeer(Napi::Env env, Napi::Object exports);
void RegisterMr(Napi::Env env, Napi::Object exports);
void RegisterCm(Napi::Env env, Napi::Object exports);

}  // namespace rdma
