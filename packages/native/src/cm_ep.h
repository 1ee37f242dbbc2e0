// librdmacm's verbs API (cm_ep.cc, cm_ep_post.cc): endpoints, each an rdma_cm id with a queue pair
// on a protection domain of its own, a send and a receive CQ on one completion channel; and
// listeners, which hand out incoming requests as endpoints. Every id is asynchronous, on an event
// channel of its own (a request's id is migrated off its listener's channel), and every channel is
// watched with a Poller: no librdmacm call made here waits for the network.
#pragma once

#include <infiniband/verbs.h>
#include <napi.h>
#include <rdma/rdma_cma.h>

#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "handles.h"
#include "poll.h"
#include "posted.h"

namespace rdma {

// What an endpoint's queue pair is made with (core's CmEpConfig, less the timeout, which the
// driver applies to its waits).
struct CmEpConfig {
  int timeout_ms = 1000;
  uint32_t max_send_wr = 1;
  uint32_t max_recv_wr = 1;
  uint32_t max_send_sge = 1;
  uint32_t max_recv_sge = 1;
  uint32_t max_inline_data = 0;
  // rdma_conn_param's: retries as librdmacm applies them when given no parameters; depths below 0
  // mean the device's maximum.
  uint8_t retry_count = 7;
  uint8_t rnr_retry_count = 7;
  int responder_resources = -1;
  int initiator_depth = -1;
};

// The verbs path's hold on a posted request (see posted.h): its regions stay registered meanwhile.
struct CmHold {
  std::vector<std::shared_ptr<CmRegionState>> regions;
  // Plain bytes of an inline request, copied when read: what the scatter/gather entries point at
  // until the request is posted (a getter run later in the same call cannot free them).
  std::vector<std::vector<uint8_t>> plain_bytes;
};
using CmPosted = PostedRequest<CmHold>;

struct CmListenerState;

struct CmEpState : std::enable_shared_from_this<CmEpState> {
  // Where the endpoint is in its set-up; a set-up waiter (setup_) waits for the step to end.
  enum class Phase { Resolving, Ready, Connecting, Accepting, Established, Rejected, Closed };
  CmEpState();
  ~CmEpState();
  // The queue pair, the CQs and their channels, the protection domain, the id and its channel, in
  // that order; the waiters fail with ECANCELED. Returns 0 or the first errno.
  int Destroy(napi_env env);
  // The queue pair, CQs and channels on `id->verbs`, on a new protection domain; 0 or an errno,
  // with `*operation` the call that failed.
  int MakeQueuePair(const char** operation);
  void OnEvent(Napi::Env env, int status);
  void OnCompletion(Napi::Env env, int status);
  // ibv_poll_cq on both CQs into `out`; 0 or an errno.
  int Drain(Napi::Env env, Napi::Array out, uint32_t* count);
  // ibv_poll_cq on both CQs into `out`, kCompletionFields numbers a completion (id, status,
  // byteLength, opcode, flags, imm), at most `capacity` completions: what is left stays in the CQs
  // for the next call. 0 or an errno.
  int DrainPacked(double* out, uint32_t capacity, uint32_t* count);
  static constexpr uint32_t kCompletionFields = 6;
  // Answers the set-up waiter: `error`, or success when it is null.
  void Settle(Napi::Env env, napi_value error);

  rdma_event_channel* channel = nullptr;
  rdma_cm_id* id = nullptr;
  ibv_pd* pd = nullptr;
  // Both CQs' channel: one descriptor to watch, and every event pending on it taken in one turn.
  ibv_comp_channel* comp_channel = nullptr;
  ibv_cq* send_cq = nullptr;
  ibv_cq* recv_cq = nullptr;
  bool has_qp = false;
  CmEpConfig config;
  Phase phase = Phase::Resolving;
  // rdma_disconnect called (the peer's DISCONNECTED leaves the queue pair as it is: cmDisconnect
  // still moves it to the error state).
  bool disconnect_called = false;
  std::vector<uint8_t> private_data;  // of the last connection event, as rdma_cm carried it
  uint8_t initiator_depth = 0;        // a request's, for the accept
  uint8_t responder_resources = 0;
  std::shared_ptr<CmListenerState> listener;  // the passive side's
  std::size_t regions = 0;       // open region handles registered on the endpoint
  uint64_t next_token = 1;
  PostedRequests<CmHold> posted;
  // A request checked and built (cm_ep_post.cc's BuildRequest), not yet posted: its work request
  // (a send-queue request's; a receive's is made when posted), scatter/gather entries and token.
  struct Built {
    ibv_send_wr wr;
    std::vector<ibv_sge> sges;
    uint64_t token;
    CmPosted entry;
  };
  // Of `posted`: receives, and send-queue requests (the unsignalled ones until a later request's
  // completion covers them). A post past config's maxRecvWr / maxSendWr is refused with ENOMEM,
  // whatever the device rounded the queues up to.
  std::size_t recvs_posted = 0;
  std::size_t sends_posted = 0;
  // Erases the entry, uncounted; the one after it.
  PostedRequests<CmHold>::iterator Forget(PostedRequests<CmHold>::iterator entry);
  // Polls both CQs until `*count` (the completions of ours taken so far) reaches `max`, each given
  // to `take` with its request (the unsignalled send-queue requests it covers forgotten first).
  // 0 or an errno.
  template <typename Take>
  int DrainWith(uint32_t max, uint32_t* count, Take take);
  double setup_id = 0;           // the event waiter that waits for create / connect / accept, if any
  std::deque<std::string> events;  // events after ESTABLISHED not yet taken by cmNextEvent
  Poller event_poller;           // the id's channel: cmNextEvent's waiters and the set-up's
  Poller completions;            // the completion channel; its waiters are the completion waits

 private:
  void HandleEvent(Napi::Env env, rdma_cm_event_type type, int status);
};

class CmEp : public Handle<CmEp> {
 public:
  static constexpr Kind kKind = Kind::CmEp;
  static constexpr const char* kClosed = "destroyed";
  using Handle::Handle;
  ~CmEp() override;
  bool IsOpen() const { return state && state->id != nullptr; }
  std::shared_ptr<CmEpState> state;
};

struct CmListenerState : std::enable_shared_from_this<CmListenerState> {
  CmListenerState();
  ~CmListenerState() { Destroy(nullptr); }
  // Fails the waiters with ECANCELED (when `env` is given), then rdma_destroy_id and the channel.
  void Destroy(napi_env env);
  void OnEvent(Napi::Env env, int status);
  rdma_event_channel* channel = nullptr;
  rdma_cm_id* id = nullptr;
  CmEpConfig config;
  std::size_t endpoints = 0;  // live endpoints it handed out
  Poller requests;            // its waiters are cmGetRequest's
};

class CmListener : public Handle<CmListener> {
 public:
  static constexpr Kind kKind = Kind::CmListener;
  static constexpr const char* kClosed = "destroyed";
  using Handle::Handle;
  bool IsOpen() const { return state && state->id != nullptr; }
  std::shared_ptr<CmListenerState> state;
};

// cm_ep_post.cc's exports: cmPost, cmPostOne, cmPostWindow, cmPollPacked, cmWaitCompletions.
void RegisterCmEpPost(Napi::Env env, Napi::Object exports);
// An errno failure as a JavaScript value (MakeError, Domain::Errno).
Napi::Value ErrnoValue(Napi::Env env, int errnum, const char* operation, const std::string& detail);

}  // namespace rdma
