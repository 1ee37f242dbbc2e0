// A queue whose work requests JavaScript posts and whose completions it reads: what connections
// and shared receive queues have in common (completions.cc). Each keeps the requests it posted
// until their completions are returned (their regions stay registered meanwhile), drains its
// completion queues into JavaScript values, and answers the callbacks waiting for completions
// through one Poller per completion channel. A connection's completions come from its CQ and, if
// it has one, its receive CQ; a shared receive queue's from its own receive CQ, each naming the
// queue pair it came on (qpNum).
#pragma once

#include <librpma.h>
#include <napi.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <deque>
#include <map>
#include <memory>

#include "poll.h"
#include "posted.h"

namespace rdma {

class Call;
struct MrLocalState;

// librpma's posted requests (see posted.h).
using Posted = PostedRequest<InFlight>;
using PostedMap = PostedRequests<InFlight>;

// Where a shared receive queue's tokens start: apart from every connection's (which start at 1), so
// that a connection's CQ can tell the queue's receives completing there from its own requests.
constexpr uint64_t kSharedReceiveTokens = uint64_t{1} << 63;

struct CompletionQueues : std::enable_shared_from_this<CompletionQueues> {
  CompletionQueues();
  virtual ~CompletionQueues() = default;

  // rpma_cq_get_wc until RPMA_E_NO_COMPLETION, from `cq` then `rcq`, into `out`; 0 or a code.
  int Drain(Napi::Env env, Napi::Array out, uint32_t* count);
  // The same into `out`, kCompletionFields numbers a completion (id, status, byteLength, opcode,
  // flags, imm, qpNum or -1), at most `capacity` completions: what is left stays in the CQs for
  // the next call (a completion read from a CQ is gone from it). 0 or a code.
  int DrainPacked(double* out, uint32_t capacity, uint32_t* count);
  static constexpr uint32_t kCompletionFields = 7;
  // Starts waiting for completions (at least one) with a callback; returns its id, or throws. With
  // `into` (a Float64Array, checked by the caller), they are drained there and the callback told
  // how many (DrainPacked's layout) instead of given objects.
  Napi::Value Wait(const Call& call, Napi::Value callback, Napi::Value into = Napi::Value());
  // Takes the wait with this id out; false if none.
  bool Cancel(double id);
  // Out of epoll before librpma closes the channels; no completion is read from here on.
  void StopWatching();
  // Fails the waiters taken (by TakeWaiters, before the queue was deleted) with RPMA_E_INVAL:
  // `why` ("the connection was deleted").
  static void FailWaiters(Napi::Env env, std::deque<Waiter>& waiters, const char* why);
  std::deque<Waiter> TakeWaiters();

  rpma_cq* cq = nullptr;
  rpma_cq* rcq = nullptr;              // a second CQ, drained after `cq` (a connection's receive CQ)
  rpma_conn* channel_conn = nullptr;   // one channel for both CQs: its events taken with rpma_conn_wait
  bool names_queue_pair = false;       // a shared receive queue's completions carry qpNum
  // A shared receive queue without a receive CQ of its own, whose receives complete on these CQs
  // (librpma's 08srq modes m and r): its completions are taken from its map and carry qpNum.
  std::shared_ptr<CompletionQueues> shared_receives;
  uint64_t next_token = 1;
  PostedMap posted;

 private:
  // What a completion says, for the drain's `take`.
  struct Fields {
    double id, status, byte_length, opcode;
    unsigned flags;
    double imm;     // meaningful when flags has IBV_WC_WITH_IMM
    double qp_num;  // -1 unless the completion names its queue pair (a shared receive queue's)
  };
  // rpma_cq_get_wc from `cq`, then `rcq`, handing each of our completions to `take` until `max`.
  template <typename Take>
  int DrainWith(uint32_t max, uint32_t* count, Take take);
  template <typename Take>
  int DrainOne(rpma_cq* from, uint32_t max, uint32_t* count, Take& take);
  // `fired`: the CQ whose channel is readable.
  void OnReadable(Napi::Env env, int status, rpma_cq* fired);
  Poller cq_channel_;
  Poller rcq_channel_;  // the receive CQ's own channel, when it has one
};

// A connection's or a shared receive queue's completion queues, or nullptr after a refusal.
CompletionQueues* OpenQueues(const Call& call, Napi::Value value);

// The queues a poll of `value` drains, or nullptr: after a refusal (thrown), or with `*none` set for
// a connection request, which has no completion queue yet (its receives complete on the connection
// it becomes).
CompletionQueues* PolledQueues(const Call& call, Napi::Value value, bool* none);

using SpinClock = std::chrono::steady_clock;
// Reads a spin's deadline from the call's arguments; false after the refusal.
using DeadlineReader = std::function<bool(const Call&, SpinClock::time_point*)>;

// What the polls of a connection or a shared receive queue share (pollCompletions and pollPacked,
// spinCompletions and spinPacked): the queue in info[0] drained into objects, or into the
// Float64Array in info[1] when `packed` (answering the count); with `read_deadline`, drained
// again until something is read or the deadline it reads passes.
Napi::Value DrainCall(const Napi::CallbackInfo& info, bool packed, const DeadlineReader& read_deadline);

}  // namespace rdma
