// Shared receive queues (rpma_srq_*): receives that any connection made with the queue consumes,
// completing on the queue's own receive CQ. Its completions are waited for through a Poller on
// the CQ's channel, as a connection's are, and name the queue pair they came on (qp_num).
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

SrqState::SrqState() : completions([this](Napi::Env env, int status) { OnCompletion(env, status); }) {}

SrqState::~SrqState() { Delete(); }

int SrqState::Delete() {
  completions.Close();  // out of epoll before librpma closes the channel
  if (srq == nullptr) return 0;
  int code = rpma_srq_delete(&srq);  // frees it even when it fails
  srq = nullptr;
  rcq = nullptr;
  Count(Kind::Srq, -1);
  if (peer) peer->users--;
  // The queue is gone: the device no longer writes the regions of receives still posted.
  ReleaseAll(posted);
  return code;
}

int SrqState::Drain(Napi::Env env, Napi::Array out, uint32_t* count) {
  constexpr int kBatch = 32;
  ibv_wc wc[kBatch];
  int got = kBatch;
  while (got == kBatch) {
    int code = rpma_cq_get_wc(rcq, kBatch, wc, &got);
    if (code == RPMA_E_NO_COMPLETION) return 0;
    if (code != 0) return code;
    for (int i = 0; i < got; i++) {
      auto found = posted.find(wc[i].wr_id);
      if (found == posted.end()) continue;
      double id = found->second.id;
      if (found->second.region) found->second.region->in_flight--;
      posted.erase(found);
      bool ok = wc[i].status == IBV_WC_SUCCESS;
      unsigned flags = ok ? wc[i].wc_flags : 0;
      Napi::Object completion = Napi::Object::New(env);
      completion.Set("id", Napi::Number::New(env, id));
      completion.Set("status", Napi::Number::New(env, static_cast<double>(wc[i].status)));
      completion.Set("byteLength", Napi::Number::New(env, ok ? static_cast<double>(wc[i].byte_len) : 0));
      completion.Set("opcode", Napi::Number::New(env, ok ? static_cast<double>(wc[i].opcode) : -1));
      completion.Set("flags", Napi::Number::New(env, static_cast<double>(flags)));
      if ((flags & IBV_WC_WITH_IMM) != 0) completion.Set("imm", Napi::Number::New(env, ntohl(wc[i].imm_data)));
      // Valid whatever the status: which connection's message this was.
      completion.Set("qpNum", Napi::Number::New(env, static_cast<double>(wc[i].qp_num)));
      out.Set((*count)++, completion);
    }
  }
  return 0;
}

void SrqState::OnCompletion(Napi::Env env, int status) {
  std::shared_ptr<SrqState> keep = shared_from_this();  // a callback may delete it
  if (status < 0) return FailAll(env, completions, "rpma_cq_wait", status);
  while (srq != nullptr && !completions.waiters.empty()) {
    int fd = -1;
    if (rpma_cq_get_fd(rcq, &fd) != 0 || !Readable(fd)) break;
    ClearLog();
    // Acknowledge and re-arm first, then drain: a completion after the drain raises a new event.
    int code = rpma_cq_wait(rcq);
    if (code == RPMA_E_NO_COMPLETION) break;
    Napi::Array out = Napi::Array::New(env);
    uint32_t count = 0;
    const char* operation = "rpma_cq_wait";
    if (code == 0) {
      operation = "rpma_cq_get_wc";
      code = Drain(env, out, &count);
      if (code == 0 && count == 0) continue;  // taken by an earlier poll: wait on
    }
    std::string log = TakeLog();
    Waiter waiter = std::move(completions.waiters.front());
    completions.waiters.pop_front();
    if (count != 0) {
      Deliver(env, waiter, nullptr, out, true);
    } else {
      Deliver(env, waiter, RpmaErrorValue(env, code, operation, log), nullptr, true);
    }
  }
  completions.PauseIfIdle();
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
  // librpma would make no receive CQ: completions would land on the connections' own queues.
  if (rcq < 1) return call.Invalid("a shared receive queue needs its own receive CQ (rcqSize 0)");
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
  rpma_cq* rcq_ptr = nullptr;
  code = rpma_srq_get_rcq(srq, &rcq_ptr);
  if (code != 0 || rcq_ptr == nullptr) {
    rpma_srq_delete(&srq);
    return call.Fail(code != 0 ? code : RPMA_E_UNKNOWN, "rpma_srq_get_rcq: no receive CQ");
  }
  Srq* handle;
  Napi::Object result = Srq::New(env, &handle);
  if (handle == nullptr) {
    rpma_srq_delete(&srq);
    return call.Fail(RPMA_E_NOMEM, "cannot make a handle for the shared receive queue; it is deleted");
  }
  handle->state = std::make_shared<SrqState>();
  handle->state->srq = srq;
  handle->state->rcq = rcq_ptr;
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
  std::deque<Waiter> waiters;
  waiters.swap(state->completions.waiters);
  ClearLog();
  int code = state->Delete();
  std::string log = TakeLog();
  for (Waiter& waiter : waiters) {
    Deliver(env, waiter, RpmaErrorValue(env, RPMA_E_INVAL, "rpma_cq_wait", "the shared receive queue was deleted"),
            nullptr, false);
  }
  if (code != 0) return call.Fail(code, Join(log, "the shared receive queue is gone"));
  return env.Undefined();
}

// srqRecv(srq, { id, dst, offset, length }).
Napi::Value SrqRecv(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Call call(env, "rpma_srq_recv", Domain::Rpma);
  RecvArgs args;
  if (!ReadRecv(call, info[1], &args)) return env.Undefined();
  Srq* handle = Open<Srq>(call, info[0]);
  if (handle == nullptr || !OpenRecv(call, &args)) return env.Undefined();
  SrqState& srq = *handle->state;
  uint64_t token = srq.next_token++;
  ClearLog();
  int code = rpma_srq_recv(srq.srq, args.dst->state->mr, static_cast<size_t>(args.offset),
                           static_cast<size_t>(args.length), reinterpret_cast<const void*>(static_cast<uintptr_t>(token)));
  std::string log = TakeLog();
  if (code != 0) return call.Fail(code, log);
  HoldRecv(srq.posted, token, args);
  return env.Undefined();
}

Napi::Value SrqPollCompletions(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Call call(env, "rpma_cq_get_wc", Domain::Rpma);
  Srq* handle = Open<Srq>(call, info[0]);
  if (handle == nullptr) return env.Undefined();
  Napi::Array out = Napi::Array::New(env);
  uint32_t count = 0;
  ClearLog();
  int code = handle->state->Drain(env, out, &count);
  std::string log = TakeLog();
  if (code != 0 && count == 0) return call.Fail(code, log);
  return out;
}

Napi::Value SrqWaitCompletions(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Call call(env, "rpma_cq_wait", Domain::Rpma);
  Srq* handle = Open<Srq>(call, info[0]);
  if (handle == nullptr || !IsCallback(call, info[1])) return env.Undefined();
  int fd = -1;
  int code = rpma_cq_get_fd(handle->state->rcq, &fd);
  if (code != 0) return call.Fail(code, "rpma_cq_get_fd");
  return StartWait(call, handle->state->completions, fd, info[1], nullptr, false);
}

// Never throws: an Effect canceller calls it.
Napi::Value SrqCancelWait(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Kind kind;
  if (!KindOf(info[0], &kind) || kind != Kind::Srq || !info[1].IsNumber()) return Napi::Boolean::New(env, false);
  auto* handle = Napi::ObjectWrap<Srq>::Unwrap(info[0].As<Napi::Object>());
  bool found = handle->state && handle->state->completions.Cancel(info[1].As<Napi::Number>().DoubleValue());
  return Napi::Boolean::New(env, found);
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
  exports.Set("srqRecv", Napi::Function::New(env, SrqRecv, "srqRecv"));
  exports.Set("srqPollCompletions", Napi::Function::New(env, SrqPollCompletions, "srqPollCompletions"));
  exports.Set("srqWaitCompletions", Napi::Function::New(env, SrqWaitCompletions, "srqWaitCompletions"));
  exports.Set("srqCancelWait", Napi::Function::New(env, SrqCancelWait, "srqCancelWait"));
  exports.Set("connQpNum", Napi::Function::New(env, ConnQpNum, "connQpNum"));
}

}  // namespace rdma
