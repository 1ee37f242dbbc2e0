// librdmacm: an id bound to a local address with a protection domain of its own, and the
// regions registered on it (rdma_reg_msgs / rdma_reg_read / rdma_reg_write, rdma_dereg_mr).
// librdmacm and verbs report through errno.
#include <infiniband/verbs.h>
#include <napi.h>
#include <netdb.h>
#include <rdma/rdma_cma.h>
#include <rdma/rdma_verbs.h>

#include <cerrno>
#include <string>

#include "errors.h"
#include "handles.h"
#include "cm_ep.h"
#include "memory.h"

namespace rdma {

int CmIdState::Destroy() {
  if (id == nullptr) return 0;
  int result = 0;
  if (pd != nullptr) result = ibv_dealloc_pd(pd);
  pd = nullptr;
  id->pd = bound_pd;  // librdmacm's own, released by rdma_destroy_ep
  rdma_destroy_ep(id);
  id = nullptr;
  Count(Kind::CmId, -1);
  return result;
}

CmIdState::~CmIdState() { Destroy(); }  // GC backstop; regions hold this state, so none is left

int CmRegionState::Dereg() {
  if (mr == nullptr) return 0;
  int result = rdma_dereg_mr(mr);  // ibv_dereg_mr: 0 or an errno value
  mr = nullptr;                    // gone either way: never dereg twice
  Count(Kind::CmMr, -1);
  if (result != 0) Quarantine(memory);
  memory.reset();
  id.reset();
  ep.reset();
  return result;
}

int CmMr::Dereg() {
  if (!state) return 0;
  std::shared_ptr<CmRegionState> region = std::move(state);
  if (region->id) region->id->regions--;
  if (region->ep) region->ep->regions--;
  // Held by a posted request: deregistered when that request lets go of it.
  return region.use_count() == 1 ? region->Dereg() : 0;
}

namespace {

int LastErrno(int fallback) { return errno != 0 ? errno : fallback; }

// rdma_getaddrinfo resolves names and rdma_create_ep binds: both may block.
class CreateIdWorker : public Napi::AsyncWorker {
 public:
  CreateIdWorker(Napi::Env env, std::string address)
      : Napi::AsyncWorker(env, "rdma_create_ep"), deferred_(env), address_(std::move(address)) {}

  // Whatever was not handed to JavaScript: OnOK is skipped when the work is cancelled, and finds
  // no JavaScript to hand it to when the environment is being torn down.
  ~CreateIdWorker() override {
    if (pd_ != nullptr) ibv_dealloc_pd(pd_);
    if (id_ != nullptr) rdma_destroy_ep(id_);
  }

  Napi::Value Promise() const { return deferred_.Promise(); }

  void Execute() override {
    rdma_addrinfo hints{};
    hints.ai_flags = RAI_PASSIVE;
    hints.ai_port_space = RDMA_PS_TCP;
    rdma_addrinfo* info = nullptr;
    errno = 0;
    int ret = rdma_getaddrinfo(address_.c_str(), nullptr, &hints, &info);
    if (ret != 0) {
      operation_ = "rdma_getaddrinfo";
      // -1 with errno, or getaddrinfo's own EAI_* code.
      if (ret == -1 || ret == EAI_SYSTEM) {
        errnum_ = LastErrno(ENODEV);
        if (errnum_ == ENODEV || errnum_ == ENOENT || errnum_ == EPERM) {
          detail_ = "librdmacm cannot open the RDMA CM device: is an RDMA device (e.g. Soft-RoCE) and the rdma_ucm "
                    "module present?";
        }
      } else {
        errnum_ = EADDRNOTAVAIL;
        detail_ = "cannot resolve " + address_ + ": " + gai_strerror(ret);
      }
      return;
    }
    errno = 0;
    ret = rdma_create_ep(&id_, info, nullptr, nullptr);
    rdma_freeaddrinfo(info);
    if (ret != 0) {
      operation_ = "rdma_create_ep";
      errnum_ = LastErrno(EINVAL);
      return;
    }
    if (id_->verbs == nullptr) {
      rdma_destroy_ep(id_);
      id_ = nullptr;
      operation_ = "rdma_create_ep";
      errnum_ = ENODEV;
      detail_ = "no RDMA device is bound to " + address_ + " (a wildcard or non-RDMA address gives no protection domain)";
      return;
    }
    errno = 0;
    pd_ = ibv_alloc_pd(id_->verbs);
    if (pd_ == nullptr) {
      rdma_destroy_ep(id_);
      id_ = nullptr;
      operation_ = "ibv_alloc_pd";
      errnum_ = LastErrno(ENOMEM);
    }
  }

  void OnOK() override {
    Napi::Env env = Env();
    if (!CanRunJs(env)) return;  // the destructor releases the id
    if (errnum_ != 0) {
      deferred_.Reject(MakeError(env, Domain::Errno, errnum_, operation_, detail_).Value());
      return;
    }
    CmId* handle;
    Napi::Object object = CmId::New(env, &handle);
    if (handle == nullptr) return;  // the destructor releases the id
    handle->state = std::make_shared<CmIdState>();
    handle->state->id = id_;
    handle->state->pd = pd_;
    handle->state->bound_pd = id_->pd;
    id_->pd = pd_;  // rdma_reg_* register with id->pd
    id_ = nullptr;
    pd_ = nullptr;
    Count(Kind::CmId, +1);
    deferred_.Resolve(object);
  }

 private:
  Settler deferred_;
  std::string address_;
  rdma_cm_id* id_ = nullptr;
  ibv_pd* pd_ = nullptr;
  int errnum_ = 0;
  const char* operation_ = "rdma_create_ep";
  std::string detail_;
};

Napi::Value CmCreateId(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (!info[0].IsString()) {
    if (!CanRunJs(env)) return Napi::Value();
    return Rejected(env, MakeError(env, Domain::Errno, EINVAL, "rdma_getaddrinfo",
                                   info[0].IsNull() || info[0].IsUndefined() ? "node is NULL" : "address must be a string")
                             .Value());
  }
  auto* worker = new CreateIdWorker(env, info[0].As<Napi::String>().Utf8Value());
  Napi::Value promise = worker->Promise();
  if (promise.IsEmpty()) {
    delete worker;  // JavaScript cannot run: nobody would hear the answer
    return promise;
  }
  worker->Queue();  // deletes itself when done
  return promise;
}

Napi::Value CmDestroyId(const Napi::CallbackInfo& info) {
  Call call(info.Env(), "rdma_destroy_ep", Domain::Errno);
  CmId* handle = Open<CmId>(call, info[0]);
  if (handle == nullptr) return info.Env().Undefined();
  CmIdState& state = *handle->state;
  if (state.regions != 0) {
    return call.InUse(std::to_string(state.regions) + (state.regions == 1 ? " region" : " regions") +
                                " still registered: deregister them first");
  }
  int result = state.Destroy();
  if (result != 0) return call.Fail(result, "ibv_dealloc_pd failed; the id is destroyed");
  return info.Env().Undefined();
}

Napi::Value CmReg(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  std::string kind = info[1].IsString() ? info[1].As<Napi::String>().Utf8Value() : "";
  const char* operation = kind == "msgs" ? "rdma_reg_msgs" : kind == "read" ? "rdma_reg_read" : "rdma_reg_write";
  Call call(env, operation, Domain::Errno);
  if (kind != "msgs" && kind != "read" && kind != "write") return call.Invalid("kind must be msgs, read or write");
  // A bound identifier's protection domain, or an endpoint's own.
  std::shared_ptr<CmIdState> id_state;
  std::shared_ptr<CmEpState> ep_state;
  Kind kind_of;
  if (KindOf(info[0], &kind_of) && kind_of == Kind::CmEp) {
    CmEp* ep = Open<CmEp>(call, info[0]);
    if (ep == nullptr) return env.Undefined();
    ep_state = ep->state;
  } else {
    CmId* id = Open<CmId>(call, info[0]);
    if (id == nullptr) return env.Undefined();
    id_state = id->state;
  }
  rdma_cm_id* cm_id = id_state ? id_state->id : ep_state->id;
  if (cm_id->pd == nullptr) return call.Invalid("the id has no protection domain");
  Bytes bytes;
  if (!ResolveBytes(call, info[2], &bytes)) return env.Undefined();

  errno = 0;
  ibv_mr* mr = kind == "msgs"   ? rdma_reg_msgs(cm_id, bytes.data, bytes.size)
               : kind == "read" ? rdma_reg_read(cm_id, bytes.data, bytes.size)
                                : rdma_reg_write(cm_id, bytes.data, bytes.size);
  if (mr == nullptr) {
    int errnum = LastErrno(EINVAL);
    return call.Fail(errnum, errnum == ENOMEM ? MemlockHintAfterEnomem(bytes.size)
                             : errnum == EPERM ? MemlockHint(bytes.size)
                                               : std::string());
  }
  CmMr* handle;
  Napi::Object object = CmMr::New(env, &handle);
  if (handle == nullptr) {
    rdma_dereg_mr(mr);
    return call.Fail(ENOMEM, "cannot make a handle for the region; it is deregistered");
  }
  auto region = std::make_shared<CmRegionState>();
  region->mr = mr;
  region->id = id_state;
  region->ep = ep_state;
  region->memory = std::move(bytes.owner);
  if (id_state) id_state->regions++;
  if (ep_state) ep_state->regions++;
  handle->state = std::move(region);
  Count(Kind::CmMr, +1);
  return object;
}

Napi::Value CmDeregMr(const Napi::CallbackInfo& info) {
  Call call(info.Env(), "rdma_dereg_mr", Domain::Errno);
  CmMr* handle = Open<CmMr>(call, info[0]);
  if (handle == nullptr) return info.Env().Undefined();
  int result = handle->Dereg();
  if (result != 0) return call.Fail(result, "the handle is gone; its memory is kept for the life of the process");
  return info.Env().Undefined();
}

Napi::Value CmMrInfo(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Call call(env, "ibv_mr", Domain::Errno);
  CmMr* handle = Open<CmMr>(call, info[0]);
  if (handle == nullptr) return env.Undefined();
  Napi::Object result = Napi::Object::New(env);
  result.Set("address", Napi::BigInt::New(env, static_cast<uint64_t>(reinterpret_cast<uintptr_t>(handle->state->mr->addr))));
  result.Set("length", Napi::Number::New(env, static_cast<double>(handle->state->mr->length)));
  result.Set("lkey", Napi::Number::New(env, handle->state->mr->lkey));
  result.Set("rkey", Napi::Number::New(env, handle->state->mr->rkey));
  return result;
}

}  // namespace

void RegisterCm(Napi::Env env, Napi::Object exports) {
  exports.Set("cmCreateId", Napi::Function::New(env, CmCreateId, "cmCreateId"));
  exports.Set("cmDestroyId", Napi::Function::New(env, CmDestroyId, "cmDestroyId"));
  exports.Set("cmReg", Napi::Function::New(env, CmReg, "cmReg"));
  exports.Set("cmDeregMr", Napi::Function::New(env, CmDeregMr, "cmDeregMr"));
  exports.Set("cmMrInfo", Napi::Function::New(env, CmMrInfo, "cmMrInfo"));
}

}  // namespace rdma
