// rpma_utils_get_ibv_context, rpma_peer_new, rpma_peer_delete.
#include <librpma.h>
#include <napi.h>

#include <string>

#include "errors.h"
#include "handles.h"

namespace rdma {

PeerState::~PeerState() {
  // GC backstop. Regions hold this state, so by now none is left.
  if (peer == nullptr) return;
  rpma_peer_delete(&peer);
  Count(Kind::Peer, -1);
}

namespace {

// Address resolution can take seconds: off the event loop, answered through a Promise.
class GetIbvContextWorker : public Napi::AsyncWorker {
 public:
  GetIbvContextWorker(Napi::Env env, std::string address, rpma_util_ibv_context_type type, std::string kind)
      : Napi::AsyncWorker(env, "rpma_utils_get_ibv_context"),
        deferred_(Napi::Promise::Deferred::New(env)),
        address_(std::move(address)),
        kind_(std::move(kind)),
        type_(type) {}

  Napi::Promise Promise() const { return deferred_.Promise(); }

  void Execute() override {
    ClearLog();
    code_ = rpma_utils_get_ibv_context(address_.c_str(), type_, &context_);
    log_ = TakeLog();
  }

  void OnOK() override {
    Napi::Env env = Env();
    if (code_ != 0) {
      std::string detail = code_ == RPMA_E_PROVIDER
                               ? "no RDMA device answers at " + kind_ + " address " + address_ +
                                     " (is an RDMA device, e.g. Soft-RoCE via `rdma link add`, bound to it?)"
                               : std::string();
      deferred_.Reject(
          MakeError(env, Domain::Rpma, code_, "rpma_utils_get_ibv_context", Join(detail, log_)).Value());
      return;
    }
    IbvContext* handle;
    Napi::Object object = IbvContext::New(env, &handle);
    handle->context = context_;
    deferred_.Resolve(object);
  }

 private:
  Napi::Promise::Deferred deferred_;
  std::string address_;
  std::string kind_;
  rpma_util_ibv_context_type type_;
  ibv_context* context_ = nullptr;
  int code_ = 0;
  std::string log_;
};

Napi::Value GetIbvContext(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Call call(env, "rpma_utils_get_ibv_context", Domain::Rpma);
  // Argument errors reject too, so that callers see one shape: a Promise.
  auto reject = [&](const std::string& detail) {
    Napi::Promise::Deferred deferred = Napi::Promise::Deferred::New(env);
    deferred.Reject(MakeError(env, Domain::Rpma, RPMA_E_INVAL, call.Operation(), detail).Value());
    return deferred.Promise();
  };
  if (!info[0].IsString()) return reject(info[0].IsNull() || info[0].IsUndefined() ? "addr is NULL" : "addr must be a string");
  std::string kind = info[1].IsString() ? info[1].As<Napi::String>().Utf8Value() : "";
  if (kind != "local" && kind != "remote") return reject("type must be \"local\" or \"remote\"");
  auto* worker = new GetIbvContextWorker(env, info[0].As<Napi::String>().Utf8Value(),
                                         kind == "local" ? RPMA_UTIL_IBV_CONTEXT_LOCAL : RPMA_UTIL_IBV_CONTEXT_REMOTE,
                                         kind);
  Napi::Promise promise = worker->Promise();
  worker->Queue();  // deletes itself when done
  return promise;
}

Napi::Value PeerNew(const Napi::CallbackInfo& info) {
  Call call(info.Env(), "rpma_peer_new", Domain::Rpma);
  IbvContext* context = Open<IbvContext>(call, info[0]);
  if (context == nullptr) return info.Env().Undefined();
  ClearLog();
  rpma_peer* peer = nullptr;
  int code = rpma_peer_new(context->context, &peer);
  std::string log = TakeLog();
  if (code != 0) return call.Fail(code, log);
  Peer* handle;
  Napi::Object object = Peer::New(info.Env(), &handle);
  handle->state = std::make_shared<PeerState>();
  handle->state->peer = peer;
  Count(Kind::Peer, +1);
  return object;
}

Napi::Value PeerDelete(const Napi::CallbackInfo& info) {
  Call call(info.Env(), "rpma_peer_delete", Domain::Rpma);
  Peer* handle = Open<Peer>(call, info[0]);
  if (handle == nullptr) return info.Env().Undefined();
  PeerState& state = *handle->state;
  // librpma would free the peer under its regions' feet; refuse and leave the peer usable.
  if (state.regions != 0) {
    return call.Invalid(std::to_string(state.regions) + (state.regions == 1 ? " region" : " regions") +
                        " still registered: deregister them first");
  }
  if (state.users != 0) {
    return call.Invalid(std::to_string(state.users) +
                        (state.users == 1 ? " endpoint, connection request or connection still uses it"
                                          : " endpoints, connection requests or connections still use it") +
                        ": shut down or delete them first");
  }
  ClearLog();
  // Sets state.peer to NULL even when it fails (librpma frees it): never retried.
  int code = rpma_peer_delete(&state.peer);
  std::string log = TakeLog();
  state.peer = nullptr;
  Count(Kind::Peer, -1);
  if (code != 0) return call.Fail(code, log);
  return info.Env().Undefined();
}

}  // namespace

void RegisterPeer(Napi::Env env, Napi::Object exports) {
  exports.Set("getIbvContext", Napi::Function::New(env, GetIbvContext, "getIbvContext"));
  exports.Set("peerNew", Napi::Function::New(env, PeerNew, "peerNew"));
  exports.Set("peerDelete", Napi::Function::New(env, PeerDelete, "peerDelete"));
}

}  // namespace rdma
