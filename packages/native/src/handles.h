// Every native pointer reaches JavaScript inside a handle: an ObjectWrap that JavaScript cannot
// construct, tagged with its kind (napi_type_tag_object, since napi_unwrap alone does not check
// the object's type), and closed at most once. Each exported function opens its handles with
// Open<T> (or Opened<T>, Unwrapped<T>), which turns NULL, a wrong kind, a closed handle and a
// handle whose native object is already gone (a worker's environment being torn down) into the
// library's own "invalid argument" instead of a crash. No other path unwraps a handle.
//
// Lifetimes never depend on GC order. A child holds a std::shared_ptr to its parent's native
// state, so a peer (or rdma_cm endpoint) outlives its regions however the wrappers are collected, even
// at environment teardown when finalizers run in no particular order. The state's destructor is
// the GC backstop: explicit close (from a Scope's finalizer) is the normal path.
#pragma once

#include <infiniband/verbs.h>
#include <librpma.h>
#include <napi.h>
#include <rdma/rdma_cma.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <unordered_map>

#include "completions.h"
#include "errors.h"
#include "keys.h"
#include "memory.h"
#include "poll.h"

namespace rdma {

enum class Kind { IbvContext, Peer, MrLocal, MrRemote, CmMr, Endpoint, ConnReq, Conn, Srq, CmEp, CmListener, Count };

// Names as the Driver calls them, for details such as "expected a peer, got a cm_mr".
const char* KindName(Kind kind);
const napi_type_tag* TypeTag(Kind kind);

// The constructors of every handle class, and the libuv watchers, per Node environment.
struct Module {
  Napi::FunctionReference constructors[static_cast<int>(Kind::Count)];
  PollSet* polls = nullptr;  // owned by itself: it outlives the module until its handles are closed
  Napi::Reference<Napi::Array> keys;  // the data path's property names (keys.h)
};

// The data path's property names for this call (keys.h).
inline Keys CallKeys(Napi::Env env) {
  Module* module = env.GetInstanceData<Module>();
  return Keys(env, module != nullptr ? &module->keys : nullptr);
}

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
    // Only New() constructs (it raises the flag around its one call, with no JavaScript run in
    // between); `new handle.constructor()` from JavaScript gets a TypeError.
    if (!Constructing()) {
      Napi::TypeError::New(info.Env(), "Illegal constructor").ThrowAsJavaScriptException();
      return;
    }
    Constructing() = false;
    info.This().As<Napi::Object>().TypeTag(TypeTag(T::kKind));
  }

  static Napi::Function Define(Napi::Env env, Module* module) {
    Napi::Function constructor = Napi::ObjectWrap<T>::DefineClass(env, KindName(T::kKind), {});
    module->constructors[static_cast<int>(T::kKind)] = Napi::Persistent(constructor);
    return constructor;
  }

  // A new, empty wrapper; the caller fills it in through *out. *out is nullptr (and an exception
  // may be pending) when JavaScript cannot make one: the environment is being torn down, or the
  // stack or the heap is exhausted. The caller then releases what it would have wrapped.
  static Napi::Object New(Napi::Env env, T** out) {
    *out = nullptr;
    Module* module = env.GetInstanceData<Module>();
    if (module == nullptr || !CanRunJs(env)) return Napi::Object();
    napi_value object = nullptr;
    Constructing() = true;
    napi_status status = napi_new_instance(env, module->constructors[static_cast<int>(T::kKind)].Value(), 0, nullptr, &object);
    Constructing() = false;
    if (status != napi_ok) return Napi::Object();
    void* wrapped = nullptr;
    if (napi_unwrap(env, object, &wrapped) != napi_ok) return Napi::Object();
    *out = static_cast<T*>(wrapped);
    return Napi::Object(env, object);
  }

 private:
  // Whether New() is making a handle of this kind on this thread (each worker has its own).
  static bool& Constructing() {
    static thread_local bool constructing = false;
    return constructing;
  }
};

// The native object behind a handle of kind T, or nullptr: napi_unwrap finds none while the
// environment (a worker) is being torn down, its finalizers run, with JavaScript still calling.
// Never throws. The caller has checked the kind (its type tag).
template <typename T>
T* Unwrapped(Napi::Value value) {
  void* wrapped = nullptr;
  if (napi_unwrap(value.Env(), value, &wrapped) != napi_ok) return nullptr;
  return static_cast<T*>(wrapped);
}

// An open handle of kind T, or nullptr (whatever the reason); never throws. The hot paths' check:
// one type tag.
template <typename T>
T* Opened(Napi::Value value) {
  if (!value.IsObject() || !value.As<Napi::Object>().CheckTypeTag(TypeTag(T::kKind))) return nullptr;
  T* handle = Unwrapped<T>(value);
  return handle != nullptr && handle->IsOpen() ? handle : nullptr;
}

// Opens a handle argument, or throws through `call` and returns nullptr.
template <typename T>
T* Open(const Call& call, Napi::Value value) {
  if (T* handle = Opened<T>(value)) return handle;
  std::string expected = KindName(T::kKind);
  if (value.IsNull() || value.IsUndefined()) return call.Invalid(expected + " is NULL"), nullptr;
  Kind kind;
  if (!KindOf(value, &kind)) return call.Invalid("expected a " + expected + " handle"), nullptr;
  if (kind != T::kKind) return call.Invalid("expected a " + expected + ", got a " + KindName(kind)), nullptr;
  T* handle = Unwrapped<T>(value);
  if (handle == nullptr) {
    return call.Invalid("the " + expected + " cannot be used: its environment (a worker) is shutting down"), nullptr;
  }
  return call.Invalid("the " + expected + " was already " + T::kClosed), nullptr;
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
  // Its device, queried for limits when the device refuses a queue. librdmacm keeps it open for
  // the life of the process, and the peer's protection domain is on it.
  ibv_context* context = nullptr;
  std::size_t regions = 0;
  // Endpoints, connection requests and connections made with it: librpma keeps the peer's pointer.
  std::size_t users = 0;
};

class Peer : public Handle<Peer> {
 public:
  static constexpr Kind kKind = Kind::Peer;
  static constexpr const char* kClosed = "deleted";
  using Handle::Handle;
  bool IsOpen() const { return state && state->peer != nullptr; }
  std::shared_ptr<PeerState> state;
};

// A local registration. Shared between its handle and the work requests posted with it, so that a
// region the device may still write into is never deregistered under it, whatever the GC does.
struct MrLocalState {
  ~MrLocalState() { Dereg(); }
  // rpma_mr_dereg, once: librpma frees the handle even when it fails.
  int Dereg();
  // The bookkeeping after rpma_mr_dereg returned `code` (the handle is gone either way): on the
  // JavaScript thread, since it lets go of the memory's backing store.
  int Released(int code);
  rpma_mr_local* mr = nullptr;
  std::shared_ptr<PeerState> peer;
  std::shared_ptr<v8::BackingStore> memory;
  std::size_t in_flight = 0;  // posted requests whose completion has not been returned
};

class MrLocal : public Handle<MrLocal> {
 public:
  static constexpr Kind kKind = Kind::MrLocal;
  static constexpr const char* kClosed = "deregistered";
  using Handle::Handle;
  bool IsOpen() const { return state && state->mr != nullptr; }
  std::shared_ptr<MrLocalState> state;
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

struct CmEpState;

// An rdma_cm registration, shared between its handle and the requests posted with it on an
// endpoint (cm_ep.h): rdma_dereg_mr runs when the last of them lets go, so a region the device may
// still read or write is never deregistered under it, however the handle is closed or collected.
struct CmRegionState {
  ~CmRegionState() { Dereg(); }
  // rdma_dereg_mr, once; returns 0 or an errno.
  int Dereg();
  ibv_mr* mr = nullptr;
  std::shared_ptr<CmEpState> ep;  // whose protection domain it is on
  std::shared_ptr<v8::BackingStore> memory;
};

class CmMr : public Handle<CmMr> {
 public:
  static constexpr Kind kKind = Kind::CmMr;
  static constexpr const char* kClosed = "deregistered";
  using Handle::Handle;
  ~CmMr() override { Dereg(); }
  bool IsOpen() const { return state != nullptr; }
  // Closes the handle: rdma_dereg_mr now, or, while a posted request holds the region, when the
  // request completes or its endpoint is destroyed. Returns 0 or an errno (of a dereg done now).
  int Dereg();
  std::shared_ptr<CmRegionState> state;
};

struct SrqState;

// What a connection is made with (struct rpma_conn_cfg, plus the peer cfg applied once connected).
struct ConnConfig {
  int timeout_ms = 1000;
  uint32_t sq_size = 0;
  uint32_t rq_size = 0;
  uint32_t cq_size = 0;
  bool direct_write_to_pmem = false;
  // rpma_conn_cfg_set_srq: kept alive (and counted as used) by whatever is made with it.
  std::shared_ptr<SrqState> srq;
  uint32_t rcq_size = 0;         // rpma_conn_cfg_set_rcq_size: a receive CQ of its own when > 0
  bool shared_channel = false;   // rpma_conn_cfg_set_compl_channel
  // rpma_conn_cfg_new + setters; nullptr and a code on failure.
  int Make(rpma_conn_cfg** out) const;
};

struct ConnReqState;

// A listening endpoint, the waits for its incoming requests, and the requests it produced that
// are not yet answered (they use its event channel, so they go before it).
struct EndpointState : std::enable_shared_from_this<EndpointState> {
  EndpointState();
  ~EndpointState();
  // Rejects the unanswered requests, stops watching and rpma_ep_shutdown; returns its code.
  int Shutdown();
  void OnReadable(Napi::Env env, int status);
  rpma_ep* ep = nullptr;
  std::shared_ptr<PeerState> peer;
  std::set<ConnReqState*> unanswered;
  Poller requests;
};

class Endpoint : public Handle<Endpoint> {
 public:
  static constexpr Kind kKind = Kind::Endpoint;
  static constexpr const char* kClosed = "shut down";
  using Handle::Handle;
  bool IsOpen() const { return state && state->ep != nullptr; }
  std::shared_ptr<EndpointState> state;
};

// A shared receive queue and its own receive CQ (srq.cc), whose completions name their queue
// pair. Connection requests and connections made with it count as its users: librpma's queue
// pairs point at it, so it is not deleted under them.
struct SrqState : CompletionQueues {
  SrqState() { names_queue_pair = true; }
  ~SrqState() override { Delete(); }
  // Stops watching, rpma_srq_delete, lets go of the receives' regions; returns the code.
  int Delete();
  rpma_srq* srq = nullptr;
  std::shared_ptr<PeerState> peer;
  std::size_t users = 0;
};

class Srq : public Handle<Srq> {
 public:
  static constexpr Kind kKind = Kind::Srq;
  static constexpr const char* kClosed = "deleted";
  using Handle::Handle;
  bool IsOpen() const { return state && state->srq != nullptr; }
  std::shared_ptr<SrqState> state;
};

struct ConnReqState {
  ~ConnReqState() { Delete(); }
  // rpma_conn_req_delete, once; returns its code.
  int Delete();
  // Forgets the request after rpma_conn_req_connect consumed it.
  void Consumed();
  rpma_conn_req* req = nullptr;
  std::shared_ptr<PeerState> peer;
  std::shared_ptr<EndpointState> endpoint;  // incoming requests only
  ConnConfig config;
  // Receives posted before the request is connected (rpma_conn_req_recv): the connection takes them.
  uint64_t next_token = 1;
  PostedMap posted;
};

class ConnReq : public Handle<ConnReq> {
 public:
  static constexpr Kind kKind = Kind::ConnReq;
  static constexpr const char* kClosed = "consumed or deleted";
  using Handle::Handle;
  bool IsOpen() const { return state && state->req != nullptr; }
  std::shared_ptr<ConnReqState> state;
};

// A connection: its events, and its completion queues (the CQ, and the receive CQ if it has one).
struct ConnState : CompletionQueues {
  ConnState();
  ~ConnState() override;
  // Stops watching, rpma_conn_delete, releases the regions of requests in flight; returns the code.
  int Delete();
  void OnEvent(Napi::Env env, int status);
  rpma_conn* conn = nullptr;
  std::shared_ptr<PeerState> peer;
  std::shared_ptr<SrqState> srq;  // its receives come from there, not from rpma_recv
  Poller events;
};

class Conn : public Handle<Conn> {
 public:
  static constexpr Kind kKind = Kind::Conn;
  static constexpr const char* kClosed = "deleted";
  using Handle::Handle;
  bool IsOpen() const { return state && state->conn != nullptr; }
  std::shared_ptr<ConnState> state;
};

// A registration whose release failed may still be reachable by the device: keep its bytes for
// the life of the process.
void Quarantine(std::shared_ptr<v8::BackingStore> memory);

void RegisterPeer(Napi::Env env, Napi::Object exports);
void RegisterMr(Napi::Env env, Napi::Object exports);
void RegisterCm(Napi::Env env, Napi::Object exports);
void RegisterConn(Napi::Env env, Napi::Object exports);
void RegisterSrq(Napi::Env env, Napi::Object exports);
void RegisterCompletions(Napi::Env env, Napi::Object exports);
void RegisterCmEp(Napi::Env env, Napi::Object exports);
void RegisterSpin(Napi::Env env, Napi::Object exports);

}  // namespace rdma
