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

#include <cstdint>
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
  // Starts waiting for completions (at least one) with a callback; returns its id, or throws.
  Napi::Value Wait(const Call& call, Napi::Value callback);
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
  int DrainOne(Napi::Env env, rpma_cq* from, Napi::Array out, uint32_t* count);
  // `fired`: the CQ whose channel is readable.
  void OnReadable(Napi::Env env, int status, rpma_cq* fired);
  Poller cq_channel_;
  Poller rcq_channel_;  // the receive CQ's own channel, when it has one
};

// A connection's or a shared receive queue's completion queues, or nullptr after a refusal.
CompletionQueues* OpenQueues(const Call& call, Napi::Value value);

}  // namespace rdma
