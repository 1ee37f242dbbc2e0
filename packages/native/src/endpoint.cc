// Listening endpoints (rpma_ep_*): the wait for incoming connection requests watches the
// endpoint's file descriptor through a Poller and answers a JavaScript callback.
#include <infiniband/verbs.h>
#include <librpma.h>
#include <napi.h>

#include <cerrno>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "conn_common.h"
#include "errors.h"
#include "handles.h"
#include "poll.h"

namespace rdma {

using namespace conn;

// ---- endpoints ----

namespace {

// A request the device refused queues for: which verb, and what to change (the sizes are the
// waiter's configuration, as librpma read them).
std::string QueueFailure(const std::string& log, const rpma_conn_cfg* cfg, ibv_context* context) {
  ConnConfig config;
  rpma_conn_cfg_get_timeout(cfg, &config.timeout_ms);
  rpma_conn_cfg_get_sq_size(cfg, &config.sq_size);
  rpma_conn_cfg_get_rq_size(cfg, &config.rq_size);
  rpma_conn_cfg_get_cq_size(cfg, &config.cq_size);
  return SetupFailure(log, config, context, "the client");
}

}  // namespace

EndpointState::EndpointState() : requests([this](Napi::Env env, int status) { OnReadable(env, status); }) {}

EndpointState::~EndpointState() { Shutdown(); }

int EndpointState::Shutdown() {
  requests.Close();
  // Unanswered requests use the endpoint's event channel: reject them while it exists.
  std::set<ConnReqState*> requests_left;
  requests_left.swap(unanswered);
  for (ConnReqState* req : requests_left) req->Delete();
  if (ep == nullptr) return 0;
  // librpma frees the endpoint even when rdma_destroy_id fails.
  int code = rpma_ep_shutdown(&ep);
  ep = nullptr;
  Count(Kind::Endpoint, -1);
  if (peer) peer->users--;
  return code;
}

void EndpointState::OnReadable(Napi::Env env, int status) {
  std::shared_ptr<EndpointState> keep = shared_from_this();  // a callback may shut it down
  if (status < 0) return FailAll(env, requests, "rpma_ep_next_conn_req", status);
  while (ep != nullptr && !requests.waiters.empty()) {
    int fd = -1;
    if (rpma_ep_get_fd(ep, &fd) != 0 || !Readable(fd)) break;
    auto srq = std::static_pointer_cast<SrqState>(requests.waiters.front().srq);
    if (srq && srq->srq == nullptr) {
      // Deleted while the wait was on: a queue pair must not be made with it.
      Waiter waiter = std::move(requests.waiters.front());
      requests.waiters.pop_front();
      Deliver(env, waiter,
              RpmaErrorValue(env, RPMA_E_INVAL, "rpma_ep_next_conn_req", "the shared receive queue was deleted"), nullptr,
              true);
      continue;
    }
    rpma_conn_req* req = nullptr;
    ClearLog();
    errno = 0;
    int code = rpma_ep_next_conn_req(ep, requests.waiters.front().cfg, &req);
    int errnum = errno;
    std::string log = TakeLog();
    if (NothingYet(code, errnum)) break;
    // An event other than a connection request (librpma acknowledges it): not for the waiter.
    if (code == RPMA_E_INVAL) continue;
    Waiter waiter = std::move(requests.waiters.front());
    requests.waiters.pop_front();
    if (code != 0) {
      std::string detail =
          code == RPMA_E_PROVIDER ? QueueFailure(log, waiter.cfg, peer ? peer->context : nullptr) : std::string();
      Deliver(env, waiter, RpmaErrorValue(env, code, "rpma_ep_next_conn_req", Join(detail, log)), nullptr, true);
      continue;
    }
    ConnConfig config;
    config.direct_write_to_pmem = waiter.direct_write_to_pmem;
    config.srq = srq;
    // The connection made from it needs to know how its completions are signalled (one channel
    // for both queues, or a receive CQ with its own): the waiter's configuration says.
    rpma_conn_cfg_get_rcq_size(waiter.cfg, &config.rcq_size);
    rpma_conn_cfg_get_compl_channel(waiter.cfg, &config.shared_channel);
    Napi::Object object = NewConnReq(env, req, peer, keep, config);
    if (object.IsEmpty()) {
      Deliver(env, waiter, RpmaErrorValue(env, RPMA_E_NOMEM, "rpma_ep_next_conn_req", "cannot make a handle; rejected"),
              nullptr, true);
      continue;
    }
    Deliver(env, waiter, nullptr, object, true);
  }
  requests.PauseIfIdle();
}

namespace {

Napi::Value EpListen(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Call call(env, "rpma_ep_listen", Domain::Rpma);
  Peer* peer = Open<Peer>(call, info[0]);
  if (peer == nullptr) return env.Undefined();
  if (!info[1].IsString()) {
    return call.Invalid(info[1].IsNull() || info[1].IsUndefined() ? "addr is NULL" : "addr must be a string");
  }
  if (!info[2].IsNumber()) return call.Invalid("port must be a number");
  double port = info[2].As<Napi::Number>().DoubleValue();
  if (!(port >= 1 && port <= 65535 && port == std::floor(port))) {
    return call.Invalid("port " + NumberText(port) +
                        " is not 1 to 65535 (librpma cannot report which port the system would choose)");
  }
  std::string address = info[1].As<Napi::String>().Utf8Value();
  std::string service = std::to_string(static_cast<int>(port));
  rpma_ep* ep = nullptr;
  ClearLog();
  int code = rpma_ep_listen(peer->state->peer, address.c_str(), service.c_str(), &ep);
  std::string log = TakeLog();
  if (code != 0) return call.Fail(code, log);
  Endpoint* handle;
  Napi::Object object = Endpoint::New(env, &handle);
  if (handle == nullptr) {
    rpma_ep_shutdown(&ep);
    return call.Fail(RPMA_E_NOMEM, "cannot make a handle for the endpoint; it is shut down");
  }
  handle->state = std::make_shared<EndpointState>();
  handle->state->ep = ep;
  handle->state->peer = peer->state;
  peer->state->users++;
  Count(Kind::Endpoint, +1);
  return object;
}

Napi::Value EpShutdown(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Call call(env, "rpma_ep_shutdown", Domain::Rpma);
  Endpoint* handle = Open<Endpoint>(call, info[0]);
  if (handle == nullptr) return env.Undefined();
  std::shared_ptr<EndpointState> state = handle->state;
  std::deque<Waiter> waiters;
  waiters.swap(state->requests.waiters);
  ClearLog();
  int code = state->Shutdown();
  std::string log = TakeLog();
  for (Waiter& waiter : waiters) {
    Deliver(env, waiter, RpmaErrorValue(env, RPMA_E_INVAL, "rpma_ep_next_conn_req", "the endpoint was shut down"), nullptr,
            false);
  }
  if (code != 0) return call.Fail(code, Join(log, "the endpoint is gone"));
  return env.Undefined();
}

Napi::Value EpNextConnReq(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Call call(env, "rpma_ep_next_conn_req", Domain::Rpma);
  Endpoint* handle = Open<Endpoint>(call, info[0]);
  if (handle == nullptr) return env.Undefined();
  ConnConfig config;
  if (!ParseConfig(call, info[1], &config) || !IsCallback(call, info[2])) return env.Undefined();
  rpma_conn_cfg* cfg = nullptr;
  int code = config.Make(&cfg);
  if (code != 0) return call.Fail(code, "rpma_conn_cfg");
  int fd = -1;
  code = rpma_ep_get_fd(handle->state->ep, &fd);
  if (code != 0) {
    rpma_conn_cfg_delete(&cfg);
    return call.Fail(code, "rpma_ep_get_fd");
  }
  return StartWait(call, handle->state->requests, fd, info[2], cfg, config.direct_write_to_pmem, config.srq);
}

}  // namespace

void RegisterEndpoint(Napi::Env env, Napi::Object exports) {
  exports.Set("epListen", Napi::Function::New(env, EpListen, "epListen"));
  exports.Set("epShutdown", Napi::Function::New(env, EpShutdown, "epShutdown"));
  exports.Set("epNextConnReq", Napi::Function::New(env, EpNextConnReq, "epNextConnReq"));
}

}  // namespace rdma
