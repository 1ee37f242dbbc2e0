// Shared receive queues (rpma_srq_*): receives that any connection made with the queue consumes,
// completing on the queue's own receive CQ, or, with none (rcqSize 0), on the CQ or receive CQ of
// the connection the message came on. Receives are posted in post.cc; completions are read and
// waited for in completions.cc, as a connection's are, and name the queue pair they came on (qp_num).
#include <infiniband/verbs.h>
#include <librpma.h>
#include <napi.h>

#include <arpa/inet.h>

#include <cstdint>
#include <string>

#include "conn_common.h"
#include "errors.h"
#include "handles.h"
#include "poll.h"

namespace rdma {

using namespace conn;

int SrqState::Delete() {
  StopWatching();  // out of epoll before librpma closes the channel
  if (srq == nullptr) return 0;
  int code = rpma_srq_delete(&srq);  // frees it even when it fails
  srq = nullptr;
  Count(Kind::Srq, -1);
  if (peer) peer->users--;
  // The queue is gone: the device no longer writes the regions of receives still posted.
  posted.clear();
  return code;
}

namespace {

// srqNew(peer, { rqSize, rcqSize }).
Napi::Value SrqNew(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Call call(env, "rpma_srq_new", Domain::Rpma);
  if (!info[1].IsObject()) return call.Invalid("the shared receive queue's cfg must be an object");
  Napi::Object object = info[1].As<Napi::Object>();
  Napi::Value rq_value = object.Get("rqSize");
  if (env.IsExceptionPending()) return call.Invalid("reading the shared receive queue's cfg threw");
  Napi::Value rcq_value = object.Get("rcqSize");
  if (env.IsExceptionPending()) return call.Invalid("reading the shared receive queue's cfg threw");
  Peer* peer = Open<Peer>(call, info[0]);
  double rq = 0, rcq = 0;
  if (peer == nullptr || !Integer(call, rq_value, "rqSize", UINT32_MAX, &rq) ||
      !Integer(call, rcq_value, "rcqSize", UINT32_MAX, &rcq)) {
    return env.Undefined();
  }
  rpma_srq_cfg* cfg = nullptr;
  int code = rpma_srq_cfg_new(&cfg);
  if (code != 0) return call.Fail(code, "rpma_srq_cfg_new");
  code = rpma_srq_cfg_set_rq_size(cfg, static_cast<uint32_t>(rq));
  if (code == 0) code = rpma_srq_cfg_set_rcq_size(cfg, static_cast<uint32_t>(rcq));
  rpma_srq* srq = nullptr;
  ClearLog();
  if (code == 0) code = rpma_srq_new(peer->state->peer, cfg, &srq);
  std::string log = TakeLog();
  rpma_srq_cfg_delete(&cfg);
  if (code != 0) return call.Fail(code, log);
  // rcqSize 0 (librpma's 08srq modes m and r): no receive CQ; the receives complete on the CQ or
  // receive CQ of the connection the message came on, which reads them from this queue's map.
  rpma_cq* rcq_ptr = nullptr;
  code = rpma_srq_get_rcq(srq, &rcq_ptr);
  if (code != 0 || (rcq_ptr == nullptr) != (rcq < 1)) {
    rpma_srq_delete(&srq);
    return call.Fail(code != 0 ? code : RPMA_E_UNKNOWN, "rpma_srq_get_rcq: not the receive CQ asked for");
  }
  Srq* handle;
  Napi::Object result = Srq::New(env, &handle);
  if (handle == nullptr) {
    rpma_srq_delete(&srq);
    return call.Fail(RPMA_E_NOMEM, "cannot make a handle for the shared receive queue; it is deleted");
  }
  handle->state = std::make_shared<SrqState>();
  handle->state->srq = srq;
  handle->state->cq = rcq_ptr;
  handle->state->next_token = kSharedReceiveTokens;
  handle->state->peer = peer->state;
  peer->state->users++;
  Count(Kind::Srq, +1);
  return result;
}

Napi::Value SrqDelete(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Call call(env, "rpma_srq_delete", Domain::Rpma);
  Srq* handle = Open<Srq>(call, info[0]);
  if (handle == nullptr) return env.Undefined();
  std::shared_ptr<SrqState> state = handle->state;
  if (state->users != 0) {
    return call.InUse(std::to_string(state->users) +
                      (state->users == 1 ? " connection or connection request still uses it"
                                         : " connections or connection requests still use it") +
                      ": delete them first");
  }
  std::deque<Waiter> waiters = state->TakeWaiters();
  ClearLog();
  int code = state->Delete();
  std::string log = TakeLog();
  CompletionQueues::FailWaiters(env, waiters, "the shared receive queue was deleted");
  if (code != 0) return call.Fail(code, Join(log, "the shared receive queue is gone"));
  return env.Undefined();
}

Napi::Value ConnQpNum(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Call call(env, "rpma_conn_get_qp_num", Domain::Rpma);
  Conn* handle = Open<Conn>(call, info[0]);
  if (handle == nullptr) return env.Undefined();
  uint32_t qp_num = 0;
  int code = rpma_conn_get_qp_num(handle->state->conn, &qp_num);
  if (code != 0) return call.Fail(code);
  return Napi::Number::New(env, static_cast<double>(qp_num));
}

}  // namespace

void RegisterSrq(Napi::Env env, Napi::Object exports) {
  exports.Set("srqNew", Napi::Function::New(env, SrqNew, "srqNew"));
  exports.Set("srqDelete", Napi::Function::New(env, SrqDelete, "srqDelete"));
  exports.Set("connQpNum", Napi::Function::New(env, ConnQpNum, "connQpNum"));
}

}  // namespace rdma
