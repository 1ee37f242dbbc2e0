// Completions of connections and shared receive queues (see completions.h), and the calls that
// read them or wait for them on either: pollCompletions, waitCompletions, and cancelWait, the one
// way to stop any wait (an endpoint's, a connection's events, completions).
#include "completions.h"

#include <infiniband/verbs.h>
#include <librpma.h>
#include <napi.h>

#include <arpa/inet.h>

#include <algorithm>
#include <cstring>
#include <string>

#include "conn_common.h"
#include "errors.h"
#include "handles.h"
#include "keys.h"
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

template <typename Take>
int CompletionQueues::DrainWith(uint32_t max, uint32_t* count, Take take) {
  // A shared receive queue without a receive CQ: its receives complete on its connections' CQs.
  if (cq == nullptr) return 0;
  int code = DrainOne(cq, max, count, take);
  if (code == 0 && rcq != nullptr) code = DrainOne(rcq, max, count, take);
  return code;
}

template <typename Take>
int CompletionQueues::DrainOne(rpma_cq* from, uint32_t max, uint32_t* count, Take& take) {
  constexpr uint32_t kBatch = 32;
  ibv_wc wc[kBatch];
  while (*count < max) {
    // Never more than the caller can take: a completion read is gone from the CQ.
    int want = static_cast<int>(std::min(kBatch, max - *count));
    int got = 0;
    int code = rpma_cq_get_wc(from, want, wc, &got);
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
      // byte_len, opcode and flags mean something only for a successful completion (byte_len: of a receive).
      bool ok = wc[i].status == IBV_WC_SUCCESS;
      unsigned flags = ok ? wc[i].wc_flags : 0;
      take(Fields{request.id, static_cast<double>(wc[i].status),
                  request.recv && ok ? static_cast<double>(wc[i].byte_len) : 0,
                  ok ? static_cast<double>(wc[i].opcode) : -1, flags,
                  // librpma puts the immediate data on the wire in network byte order (htonl).
                  (flags & IBV_WC_WITH_IMM) != 0 ? static_cast<double>(ntohl(wc[i].imm_data)) : 0,
                  // Valid whatever the status: which connection's message this was.
                  names_queue_pair || owner != &posted ? static_cast<double>(wc[i].qp_num) : -1});
      (*count)++;
    }
    if (got < want) return 0;
  }
  return 0;
}

int CompletionQueues::Drain(Napi::Env env, Napi::Array out, uint32_t* count) {
  Keys keys = CallKeys(env);
  return DrainWith(UINT32_MAX, count, [&](const Fields& f) {
    bool with_imm = (f.flags & IBV_WC_WITH_IMM) != 0;
    DefineElement(env, out, *count,
                  CompletionObject(env, keys, f.id, f.status, f.byte_length, f.opcode, static_cast<double>(f.flags),
                                   with_imm ? &f.imm : nullptr, f.qp_num >= 0 ? &f.qp_num : nullptr));
  });
}

int CompletionQueues::DrainPacked(double* out, uint32_t capacity, uint32_t* count) {
  return DrainWith(capacity, count, [&](const Fields& f) {
    double* at = out + static_cast<std::size_t>(*count) * kCompletionFields;
    at[0] = f.id;
    at[1] = f.status;
    at[2] = f.byte_length;
    at[3] = f.opcode;
    at[4] = static_cast<double>(f.flags);
    at[5] = f.imm;
    at[6] = f.qp_num;
  });
}

Napi::Value CompletionQueues::Wait(const Call& call, Napi::Value callback, Napi::Value into) {
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
  if (!into.IsEmpty() && id.IsNumber()) cq_channel_.waiters.back().into = Napi::Persistent(into);
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
  // libuv reported the descriptor readable: the first pass reads it without asking again.
  for (bool first = true; cq != nullptr && fired != nullptr && !cq_channel_.waiters.empty(); first = false) {
    int fd = -1;
    if (!first && (rpma_cq_get_fd(fired, &fd) != 0 || !Readable(fd))) break;
    // Takes the channel's event, acknowledges it and re-arms the queue; only then drain, so that a
    // completion arriving after the drain raises a new event. A shared channel is read through the
    // connection (rpma_cq_wait refuses it); both queues are drained either way.
    ClearLog();
    rpma_cq* which = nullptr;
    int code = channel_conn != nullptr ? rpma_conn_wait(channel_conn, 0, &which, nullptr) : rpma_cq_wait(fired);
    if (code == RPMA_E_NO_COMPLETION) break;  // nothing to read after all
    // A packed wait's completions go into its array (no object made here), the count answered.
    Waiter& front = cq_channel_.waiters.front();
    bool packed = !front.into.IsEmpty();
    Napi::Array out = packed ? Napi::Array() : Napi::Array::New(env);
    uint32_t count = 0;
    const char* operation = "rpma_cq_wait";
    std::string detail;
    if (code == 0) {
      operation = "rpma_cq_get_wc";
      double* into = nullptr;
      uint32_t capacity = 0;
      if (!packed) {
        code = Drain(env, out, &count);
      } else if (CompletionRowsOf(env, front.into.Value(), kCompletionFields, &into, &capacity)) {
        code = DrainPacked(into, capacity, &count);
      } else {
        code = RPMA_E_INVAL;  // detached since the wait began: nothing read, the completions stay queued
        detail = "the completions' array is no longer a Float64Array that holds one";
      }
      if (code == 0 && count == 0) continue;  // already taken by an earlier drain: wait on
    }
    std::string log = TakeLog();
    if (!detail.empty()) log = detail;
    Waiter waiter = std::move(front);
    cq_channel_.waiters.pop_front();
    if (count != 0) {
      Deliver(env, waiter, nullptr, packed ? Napi::Value(Napi::Number::New(env, count)) : Napi::Value(out), true);
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

CompletionQueues* PolledQueues(const Call& call, Napi::Value value, bool* none) {
  if (Conn* conn = Opened<Conn>(value)) return conn->state.get();  // the hot path: one type-tag check
  Kind kind;
  if (KindOf(value, &kind) && kind == Kind::ConnReq) {
    *none = Open<ConnReq>(call, value) != nullptr;
    return nullptr;
  }
  return OpenQueues(call, value);
}

Napi::Value DrainCall(const Napi::CallbackInfo& info, bool packed, const DeadlineReader& read_deadline) {
  Napi::Env env = info.Env();
  Call call(env, "rpma_cq_get_wc", Domain::Rpma);
  bool none = false;
  CompletionQueues* queues = PolledQueues(call, info[0], &none);
  if (queues == nullptr && !none) return env.Undefined();
  double* into = nullptr;
  uint32_t capacity = 0;
  if (packed && !CompletionRows(call, info[1], CompletionQueues::kCompletionFields, &into, &capacity)) return env.Undefined();
  auto deadline = SpinClock::time_point::min();  // one drain
  if (read_deadline && !read_deadline(call, &deadline)) return env.Undefined();
  Napi::Array out = packed ? Napi::Array() : Napi::Array::New(env);
  uint32_t count = 0;
  int code = 0;
  std::string log;
  // A connection request has no completion queue yet: none, and nothing can arrive to spin for.
  if (queues != nullptr) {
    ClearLog();
    do {
      code = packed ? queues->DrainPacked(into, capacity, &count) : queues->Drain(env, out, &count);
    } while (code == 0 && count == 0 && SpinClock::now() < deadline);
    log = TakeLog();
  }
  if (code != 0 && count == 0) return call.Fail(code, log);
  return packed ? Napi::Value(Napi::Number::New(env, count)) : Napi::Value(out);
}

namespace {

// pollCompletions(queue): the completions already queued, possibly none (a connection request: none).
Napi::Value PollCompletions(const Napi::CallbackInfo& info) { return DrainCall(info, false, nullptr); }

// pollPacked(queue, into): pollCompletions' completions as numbers in a Float64Array,
// kCompletionFields a completion (no object made per completion: JavaScript makes them through its
// inline caches); returns how many. A full array may leave completions in the CQs: poll again.
Napi::Value PollPacked(const Napi::CallbackInfo& info) { return DrainCall(info, true, nullptr); }

// waitPacked(queue, into, callback): waitCompletions', the completions drained into `into` as
// pollPacked does and the callback told how many (at least one; a full array may leave more).
Napi::Value WaitPacked(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Call call(env, "rpma_cq_wait", Domain::Rpma);
  CompletionQueues* queues = OpenQueues(call, info[0]);
  double* into = nullptr;
  uint32_t capacity = 0;
  if (queues == nullptr || !CompletionRows(call, info[1], CompletionQueues::kCompletionFields, &into, &capacity) ||
      !IsCallback(call, info[2])) {
    return env.Undefined();
  }
  return queues->Wait(call, info[2], info[1]);
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
  exports.Set("pollPacked", Napi::Function::New(env, PollPacked, "pollPacked"));
  exports.Set("waitCompletions", Napi::Function::New(env, WaitCompletions, "waitCompletions"));
  exports.Set("waitPacked", Napi::Function::New(env, WaitPacked, "waitPacked"));
  exports.Set("cancelWait", Napi::Function::New(env, CancelWait, "cancelWait"));
}

}  // namespace rdma
