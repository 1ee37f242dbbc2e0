// librdmacm: the regions registered on an endpoint's own protection domain (rdma_reg_msgs /
// rdma_reg_read / rdma_reg_write, rdma_dereg_mr). librdmacm and verbs report through errno.
#include <infiniband/verbs.h>
#include <napi.h>
#include <rdma/rdma_cma.h>
#include <rdma/rdma_verbs.h>

#include <cerrno>
#include <string>

#include "errors.h"
#include "handles.h"
#include "cm_ep.h"
#include "memory.h"

namespace rdma {

int CmRegionState::Dereg() {
  if (mr == nullptr) return 0;
  int result = rdma_dereg_mr(mr);  // ibv_dereg_mr: 0 or an errno value
  mr = nullptr;                    // gone either way: never dereg twice
  Count(Kind::CmMr, -1);
  if (result != 0) Quarantine(memory);
  memory.reset();
  ep.reset();
  return result;
}

int CmMr::Dereg() {
  if (!state) return 0;
  std::shared_ptr<CmRegionState> region = std::move(state);
  if (region->ep) region->ep->regions--;
  // Held by a posted request: deregistered when that request lets go of it.
  return region.use_count() == 1 ? region->Dereg() : 0;
}

namespace {

int LastErrno(int fallback) { return errno != 0 ? errno : fallback; }

Napi::Value CmReg(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  std::string kind = info[1].IsString() ? info[1].As<Napi::String>().Utf8Value() : "";
  const char* operation = kind == "msgs" ? "rdma_reg_msgs" : kind == "read" ? "rdma_reg_read" : "rdma_reg_write";
  Call call(env, operation, Domain::Errno);
  if (kind != "msgs" && kind != "read" && kind != "write") return call.Invalid("kind must be msgs, read or write");
  // The endpoint's own protection domain.
  CmEp* ep = Open<CmEp>(call, info[0]);
  if (ep == nullptr) return env.Undefined();
  std::shared_ptr<CmEpState> ep_state = ep->state;
  rdma_cm_id* cm_id = ep_state->id;
  if (cm_id->pd == nullptr) return call.Invalid("the endpoint has no protection domain");
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
  region->ep = ep_state;
  region->memory = std::move(bytes.owner);
  ep_state->regions++;
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
  exports.Set("cmReg", Napi::Function::New(env, CmReg, "cmReg"));
  exports.Set("cmDeregMr", Napi::Function::New(env, CmDeregMr, "cmDeregMr"));
  exports.Set("cmMrInfo", Napi::Function::New(env, CmMrInfo, "cmMrInfo"));
}

}  // namespace rdma
