// Completions of connections and shared receive queues (see completions.h), and the calls that
// read them or wait for them on either: pollCompletions, waitCompletions, and cancelWait, the one
// way to stop any wait (an endpoint's, a connection's events, completions).
#include "completions.h"

#include <infiniband/verbs.h>
#include <librpma.h>
#include <napi.h>

#include <arpa/inet.h>

#include <cstring>
#include <string>

#include "conn_common.h"
#include "errors.h"
#include "handles.h"
#include "poll.h"

namespace rdma {

using namespace conn;

InFlight::InFlight(std::shared_ptr<MrLocalState> region) : region_(std::move(region)) {
  // The region stays registered (its dereg refused) until this request's record is erased.
  if (region_) region_->in_flight++;
}

InFlight& InFlight::operator=(InFlight&& other) noexcept {
  if (this != &other) {
    Release();
    region_ = std::move(other.region_);
  }
  return *this;
}

void InFlight::Release() {
  if (region_) region_->in_flight--;
  region_.reset();
}

CompletionQueues::CompletionQueues()
    : cq_channel_([this](Napi::Env env, int status) { OnReadable(env, status, cq); }),
      rcq_channel_([this](Napi::Env env, int status) { OnReadable(env, status, rcq); }) {}

void CompletionQueues::StopWatching() {
  cq_channel_.Close();
  rcq_channel_.Close();
  cq = nullptr;
  rcq = nullptr;
  channel_conn = nullptr;
}

std::deque<Waiter> CompletionQueues::TakeWaiters() {
  std::deque<Waiter> waiters;
  waiters.swap(cq_channel_.waiters);
  return waiters;
}

void CompletionQueues::FailWaiters(Napi::Env env, std::deque<Waiter>& waiters, const char* why) {
  for (Waiter& waiter : waiters) Deliver(env, waiter, RpmaErrorValue(env, RPMA_E_INVAL, "rpma_cq_wait", why), nullptr, false);
}

bool CompletionQueues::Cancel(double id) {
  if (!cq_channel_.Cancel(id)) return false;
  if (cq_channel_.waiters.empty()) rcq_channel_.Pause();
  return true;
}

int CompletionQueues::Drain(Napi::Env env, Napi::Array out, uint32_t* count) {
  // A shared receive queue without a receive CQ: its receives complete on its connections' CQs.
  if (cq == nullptr) return 0;
  int code = DrainOne(env, cq, out, count);
  if (code == 0 && rcq != nullptr) code = DrainOne(env, rcq, out, count);
  return code;
}

int CompletionQueues::DrainOne(Napi::Env env, rpma_cq* from, Napi::Array out, uint32_t* count) {
  constexpr int kBatch = 32;
  ibv_wc wc[kBatch];
  for (;;) {
    int got = 0;
    int code = rpma_cq_get_wc(from, kBatch, wc, &got);
    if (code == RPMA_E_NO_COMPLETION) return 0;
    if (code != 0) return code;
    for (int i = 0; i < got; i++) {
      PostedMap* owner = &posted;
      auto found = posted.find(wc[i].wr_id);
      if (found == posted.end() && shared_receives != nullptr && wc[i].wr_id >= kSharedReceiveTokens) {
        owner = &shared_receives->posted;
        found = owner->find(wc[i].wr_id);
      }
      if (found == owner->end()) continue;  // not a request of ours
      // A send-queue request's completion covers the unsignalled ones posted before it.
      if (!found->second.recv) ForgetCovered(posted, found, [this](PostedMap::iterator it) { return posted.erase(it); });
      Posted request = std::move(found->second);
      owner->erase(found);
      Napi::Object completion = Napi::Object::New(env);
      completion.Set("id", Napi::Number::New(env, request.id));
      completion.Set("status", Napi::Number::New(env, static_cast<double>(wc[i].status)));
      // byte_len, opcode and flags mean something only for a successful completion (byte_len: of a receive).
      bool ok = wc[i].status == IBV_WC_SUCCESS;
      double length = request.recv && ok ? static_cast<double>(wc[i].byte_len) : 0;
      completion.Set("byteLength", Napi::Number::New(env, length));
      completion.Set("opcode", Napi::Number::New(env, ok ? static_cast<double>(wc[i].opcode) : -1));
      unsigned flags = ok ? wc[i].wc_flags : 0;
      completion.Set("flags", Napi::Number::New(env, static_cast<double>(flags)));
      // librpma puts the immediate data on the wire in network byte order (htonl).
      if ((flags & IBV_WC_WITH_IMM) != 0) completion.Set("imm", Napi::Number::New(env, ntohl(wc[i].imm_data)));
      // Valid whatever the status: which connection's message this was.
      if (names_queue_pair || owner != &posted) completion.Set("qpNum", Napi::Number::New(env, static_cast<double>(wc[i].qp_num)));
      out.Set((*count)++, completion);
    }
    if (got < kBatch) return 0;
  }
}

Napi::Value CompletionQueues::Wait(const Call& call, Napi::Value callback) {
  if (cq == nullptr) {
    return call.Invalid(
        "the shared receive queue has no receive CQ (rcqSize 0): its receives complete on its connections' CQs; "
        "wait on those");
  }
  int fd = -1;
  int code = rpma_cq_get_fd(cq, &fd);
  if (code != 0) return call.Fail(code, "rpma_cq_get_fd");
  // A receive CQ with a channel of its own is watched too; its events serve the same waiters.
  int rfd = -1;
  if (rcq != nullptr && channel_conn == nullptr && (code = rpma_cq_get_fd(rcq, &rfd)) != 0) {
    return call.Fail(code, "rpma_cq_get_fd");
  }
  Napi::Value id = StartWait(call, cq_channel_, fd, callback, nullptr, false);
  if (rfd >= 0 && id.IsNumber()) {
    int errnum = rcq_channel_.Watch(call.Env(), rfd);
    if (errnum != 0) {
      cq_channel_.Cancel(id.As<Napi::Number>().DoubleValue());
      return call.Fail(RPMA_E_PROVIDER, std::string("cannot watch the receive CQ's channel: ") + std::strerror(errnum));
    }
  }
  return id;
}

void CompletionQueues::OnReadable(Napi::Env env, int status, rpma_cq* fired) {
  std::shared_ptr<CompletionQueues> keep = shared_from_this();  // a callback may delete the queue
  if (status < 0) {
    FailAll(env, cq_channel_, "rpma_cq_wait", status);
    rcq_channel_.Pause();
    return;
  }
  while (cq != nullptr && fired != nullptr && !cq_channel_.waiters.empty()) {
    int fd = -1;
    if (rpma_cq_get_fd(fired, &fd) != 0 || !Readable(fd)) break;
    // Takes the channel's event, acknowledges it and re-arms the queue; only then drain, so that a
    // completion arriving after the drain raises a new event. A shared channel is read through the
    // connection (rpma_cq_wait refuses it); both queues are drained either way.
    ClearLog();
    rpma_cq* which = nullptr;
    int code = channel_conn != nullptr ? rpma_conn_wait(channel_conn, 0, &which, nullptr) : rpma_cq_wait(fired);
    if (code == RPMA_E_NO_COMPLETION) break;  // nothing to read after all
    Napi::Array out = Napi::Array::New(env);
    uint32_t count = 0;
    const char* operation = "rpma_cq_wait";
    if (code == 0) {
      operation = "rpma_cq_get_wc";
      code = Drain(env, out, &count);
      if (code == 0 && count == 0) continue;  // already taken by an earlier drain: wait on
    }
    std::string log = TakeLog();
    Waiter waiter = std::move(cq_channel_.waiters.front());
    cq_channel_.waiters.pop_front();
    if (count != 0) {
      Deliver(env, waiter, nullptr, out, true);
    } else {
      Deliver(env, waiter, RpmaErrorValue(env, code, operation, log), nullptr, true);
    }
  }
  cq_channel_.PauseIfIdle();
  if (cq_channel_.waiters.empty()) rcq_channel_.Pause();
}

CompletionQueues* OpenQueues(const Call& call, Napi::Value value) {
  if (Conn* conn = Opened<Conn>(value)) return conn->state.get();
  Kind kind;
  if (KindOf(value, &kind) && kind == Kind::Srq) {
    Srq* srq = Open<Srq>(call, value);
    return srq != nullptr ? srq->state.get() : nullptr;
  }
  if (!KindOf(value, &kind)) return Open<Conn>(call, value), nullptr;  // NULL, or not a handle
  // Another kind, or a closed connection: the refusal names what was expected.
  if (kind != Kind::Conn) return call.Invalid(std::string("expected a conn or an srq, got a ") + KindName(kind)), nullptr;
  Conn* conn = Open<Conn>(call, value);
  return conn != nullptr ? conn->state.get() : nullptr;
}

namespace {

// pollCompletions(queue): the completions already queued, possibly none. A connection request
// has no completion queue yet (its receives complete on the connection it becomes): none.
Napi::Value PollCompletions(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Call call(env, "rpma_cq_get_wc", Domain::Rpma);
  CompletionQueues* queues = nullptr;
  if (Conn* conn = Opened<Conn>(info[0])) {
    queues = conn->state.get();  // the hot path: one type-tag check
  } else {
    Kind kind;
    if (KindOf(info[0], &kind) && kind == Kind::ConnReq) {
      if (Open<ConnReq>(call, info[0]) == nullptr) return env.Undefined();
      return Napi::Array::New(env);
    }
    queues = OpenQueues(call, info[0]);
    if (queues == nullptr) return env.Undefined();
  }
  Napi::Array out = Napi::Array::New(env);
  uint32_t count = 0;
  ClearLog();
  int code = queues->Drain(env, out, &count);
  std::string log = TakeLog();
  if (code != 0 && count == 0) return call.Fail(code, log);
  return out;
}

// waitCompletions(queue, callback): returns the wait's id for cancelWait.
Napi::Value WaitCompletions(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Call call(env, "rpma_cq_wait", Domain::Rpma);
  CompletionQueues* queues = OpenQueues(call, info[0]);
  if (queues == nullptr || !IsCallback(call, info[1])) return env.Undefined();
  return queues->Wait(call, info[1]);
}

// Never throws: an Effect canceller calls it, and a handle closed since has no waiters left.
Napi::Value CancelWait(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Kind kind;
  if (!KindOf(info[0], &kind) || !info[1].IsNumber()) return Napi::Boolean::New(env, false);
  double id = info[1].As<Napi::Number>().DoubleValue();
  bool found = false;
  if (kind == Kind::Endpoint) {
    Endpoint* handle = Unwrapped<Endpoint>(info[0]);
    found = handle != nullptr && handle->state && handle->state->requests.Cancel(id);
  } else if (kind == Kind::Conn) {
    Conn* handle = Unwrapped<Conn>(info[0]);
    found = handle != nullptr && handle->state && (handle->state->events.Cancel(id) || handle->state->Cancel(id));
  } else if (kind == Kind::Srq) {
    Srq* handle = Unwrapped<Srq>(info[0]);
    found = handle != nullptr && handle->state && handle->state->Cancel(id);
  }
  return Napi::Boolean::New(env, found);
}

}  // namespace

void RegisterCompletions(Napi::Env env, Napi::Object exports) {
  exports.Set("pollCompletions", Napi::Function::New(env, PollCompletions, "pollCompletions"));
  exports.Set("waitCompletions", Napi::Function::New(env, WaitCompletions, "waitCompletions"));
  exports.Set("cancelWait", Napi::Function::New(env, CancelWait, "cancelWait"));
}

}  // namespace rdma
