// Connection requests (rpma_conn_req_*): outgoing ones made off the event loop, incoming ones
// from an endpoint; connecting one makes a connection.
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

#include "async_work.h"
#include "conn_common.h"
#include "errors.h"
#include "handles.h"
#include "poll.h"
#include "private_data.h"

namespace rdma {

using namespace conn;

int ConnConfig::Make(rpma_conn_cfg** out) const {
  *out = nullptr;
  rpma_conn_cfg* cfg = nullptr;
  int code = rpma_conn_cfg_new(&cfg);
  if (code != 0) return code;
  if ((code = rpma_conn_cfg_set_timeout(cfg, timeout_ms)) != 0 || (code = rpma_conn_cfg_set_sq_size(cfg, sq_size)) != 0 ||
      (code = rpma_conn_cfg_set_rq_size(cfg, rq_size)) != 0 || (code = rpma_conn_cfg_set_cq_size(cfg, cq_size)) != 0 ||
      (code = rpma_conn_cfg_set_rcq_size(cfg, rcq_size)) != 0 ||
      (code = rpma_conn_cfg_set_compl_channel(cfg, shared_channel)) != 0 ||
      (srq && (code = rpma_conn_cfg_set_srq(cfg, srq->srq)) != 0)) {  // NULL is refused: only when there is one
    rpma_conn_cfg_delete(&cfg);
    return code;
  }
  *out = cfg;
  return 0;
}

// ---- connection requests ----

int ConnReqState::Delete() {
  // Its queue pair goes with it: the device no longer reaches the regions of its receives.
  posted.clear();
  if (req == nullptr) return 0;
  // Sets req to NULL even when it fails.
  int code = rpma_conn_req_delete(&req);
  req = nullptr;
  Consumed();
  return code;
}

void ConnReqState::Consumed() {
  req = nullptr;
  Count(Kind::ConnReq, -1);
  if (endpoint) endpoint->unanswered.erase(this);
  if (peer) peer->users--;
  if (config.srq) config.srq->users--;
  // The shared states stay: an endpoint outlives its requests' wrappers, harmlessly.
}

namespace {

// rpma_conn_req_new resolves the address and the route: up to the timeout, off the event loop.
class ConnReqNewJob {
 public:
  ConnReqNewJob(std::shared_ptr<PeerState> peer, std::string address, std::string service, const ConnConfig& config,
                rpma_conn_cfg* cfg)
      : peer_(std::move(peer)), address_(std::move(address)), service_(std::move(service)), config_(config), cfg_(cfg) {
    peer_->users++;  // the worker thread uses the peer
    if (config_.srq) config_.srq->users++;  // and librpma puts the shared receive queue in the new queue pair
  }
  ConnReqNewJob(const ConnReqNewJob&) = delete;
  ConnReqNewJob& operator=(const ConnReqNewJob&) = delete;

  ~ConnReqNewJob() {
    if (req_ != nullptr) rpma_conn_req_delete(&req_);
    if (cfg_ != nullptr) rpma_conn_cfg_delete(&cfg_);
    peer_->users--;
    if (config_.srq) config_.srq->users--;
  }

  void Run() {
    ClearLog();
    code_ = rpma_conn_req_new(peer_->peer, address_.c_str(), service_.c_str(), cfg_, &req_);
    log_ = TakeLog();
  }

  Outcome Settle(Napi::Env env) {
    if (code_ != 0) {
      std::string detail = code_ != RPMA_E_PROVIDER
                               ? std::string()
                               : SetupFailure(log_, config_, peer_->context, address_ + ":" + service_);
      return Outcome::Reject(RpmaErrorValue(env, code_, "rpma_conn_req_new", Join(detail, log_)));
    }
    rpma_conn_req* req = req_;
    req_ = nullptr;
    Napi::Object object = NewConnReq(env, req, peer_, nullptr, config_);  // deletes the request if it fails
    if (object.IsEmpty()) return Outcome::Unmade("cannot make a handle for the connection request; it is deleted");
    return Outcome::Resolve(object);
  }

 private:
  std::shared_ptr<PeerState> peer_;
  std::string address_;
  std::string service_;
  ConnConfig config_;
  rpma_conn_cfg* cfg_;
  rpma_conn_req* req_ = nullptr;
  int code_ = 0;
  std::string log_;
};

Napi::Value ConnReqNew(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Call call(env, "rpma_conn_req_new", Domain::Rpma);
  // Argument errors reject too, so that callers see one shape: a Promise.
  auto reject = [&]() {
    // Call::Fail left its coded error pending (or nothing, if JavaScript cannot run).
    napi_value error = nullptr;
    bool pending = false;
    if (napi_is_exception_pending(env, &pending) != napi_ok || !pending) return Napi::Value();
    napi_get_and_clear_last_exception(env, &error);
    return Rejected(env, error);
  };
  Peer* peer = Open<Peer>(call, info[0]);
  if (peer == nullptr) return reject();
  if (!info[1].IsString()) {
    call.Invalid(info[1].IsNull() || info[1].IsUndefined() ? "addr is NULL" : "addr must be a string");
    return reject();
  }
  double port;
  ConnConfig config;
  if (!Integer(call, info[2], "port", 65535, &port) || !ParseConfig(call, info[3], &config)) return reject();
  if (port < 1) {
    call.Invalid("port 0 is not 1 to 65535");
    return reject();
  }
  rpma_conn_cfg* cfg = nullptr;
  int code = config.Make(&cfg);
  if (code != 0) {
    call.Fail(code, "rpma_conn_cfg");
    return reject();
  }
  return QueueWork<ConnReqNewJob>(env, "rpma_conn_req_new", peer->state, info[1].As<Napi::String>().Utf8Value(),
                                  std::to_string(static_cast<int>(port)), config, cfg);
}

Napi::Value ConnReqPrivateData(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Call call(env, "rpma_conn_req_get_private_data", Domain::Rpma);
  ConnReq* handle = Open<ConnReq>(call, info[0]);
  if (handle == nullptr) return env.Undefined();
  rpma_conn_private_data pdata{};
  int code = rpma_conn_req_get_private_data(handle->state->req, &pdata);
  if (code != 0) return call.Fail(code);
  return CopyBytes(env, pdata.ptr, pdata.len);
}

Napi::Value ConnReqConnect(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Call call(env, "rpma_conn_req_connect", Domain::Rpma);
  ConnReq* handle = Open<ConnReq>(call, info[0]);
  if (handle == nullptr) return env.Undefined();
  std::vector<uint8_t> bytes;
  if (!info[1].IsNull() && !info[1].IsUndefined()) {
    if (!info[1].IsTypedArray() || info[1].As<Napi::TypedArray>().TypedArrayType() != napi_uint8_array) {
      return call.Invalid("private data must be a Uint8Array");
    }
    Napi::Uint8Array data = info[1].As<Napi::Uint8Array>();
    // rdma_cm's limits in the TCP port space (private_data.h): with a connection request, with an
    // accept. Refused here, before librpma consumes the request, so that the caller can still
    // reject it (rpma_conn_req_delete) and the client hears REJECTED at once instead of waiting
    // out its timeout on a request the device refused.
    std::size_t limit = handle->state->endpoint ? private_data::kAcceptLimit : private_data::kConnectLimit;
    if (data.ByteLength() > limit) {
      return call.Invalid("private data is " + std::to_string(data.ByteLength()) + " bytes; rdma_cm carries at most " +
                          std::to_string(limit) + (handle->state->endpoint ? " with an accept" : " with a connection request"));
    }
    bytes.assign(data.Data(), data.Data() + data.ByteLength());
  }
  std::shared_ptr<ConnReqState> req = handle->state;
  // librpma refuses private data of length 0: no private data is what that means.
  rpma_conn_private_data pdata{bytes.data(), static_cast<uint8_t>(bytes.size())};
  rpma_conn* conn = nullptr;
  ClearLog();
  int code = rpma_conn_req_connect(&req->req, bytes.empty() ? nullptr : &pdata, &conn);
  std::string log = TakeLog();
  // Consumed, success or not (unless librpma refused its arguments before looking at it).
  if (req->req == nullptr) req->Consumed();
  if (code != 0) {
    if (req->req == nullptr) req->posted.clear();
    return call.Fail(code, log);
  }

  Conn* wrapper;
  Napi::Object object = Conn::New(env, &wrapper);
  if (wrapper == nullptr) {
    rpma_conn_delete(&conn);
    req->posted.clear();
    return call.Fail(RPMA_E_NOMEM, "cannot make a handle for the connection; it is deleted");
  }
  auto state = std::make_shared<ConnState>();
  state->conn = conn;
  // The receives posted on the request are the connection's now.
  state->posted.swap(req->posted);
  state->next_token = req->next_token;
  state->peer = req->peer;
  state->peer->users++;
  state->srq = req->config.srq;
  if (state->srq) state->srq->users++;
  // A queue without a receive CQ: its receives complete on this connection's CQs.
  if (state->srq && state->srq->cq == nullptr) state->shared_receives = state->srq;
  Count(Kind::Conn, +1);
  wrapper->state = state;
  code = rpma_conn_get_cq(conn, &state->cq);
  if (code == 0) code = rpma_conn_get_rcq(conn, &state->rcq);
  if (req->config.shared_channel) state->channel_conn = conn;
  if (code == 0 && req->config.direct_write_to_pmem) {
    // rpma_flush(PERSISTENT) is refused (RPMA_E_NOSUPP) unless the remote peer's cfg says so.
    rpma_peer_cfg* pcfg = nullptr;
    code = rpma_peer_cfg_new(&pcfg);
    if (code == 0) {
      code = rpma_peer_cfg_set_direct_write_to_pmem(pcfg, true);
      if (code == 0) code = rpma_conn_apply_remote_peer_cfg(conn, pcfg);
      rpma_peer_cfg_delete(&pcfg);
    }
  }
  if (code != 0) {
    state->Delete();
    return call.Fail(code, "setting up the connection failed; it is deleted");
  }
  return object;
}

Napi::Value ConnReqDelete(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Call call(env, "rpma_conn_req_delete", Domain::Rpma);
  ConnReq* handle = Open<ConnReq>(call, info[0]);
  if (handle == nullptr) return env.Undefined();
  ClearLog();
  int code = handle->state->Delete();
  std::string log = TakeLog();
  if (code != 0) return call.Fail(code, Join(log, "the request is gone"));
  return env.Undefined();
}

}  // namespace

void RegisterConnReq(Napi::Env env, Napi::Object exports) {
  exports.Set("connReqNew", Napi::Function::New(env, ConnReqNew, "connReqNew"));
  exports.Set("connReqPrivateData", Napi::Function::New(env, ConnReqPrivateData, "connReqPrivateData"));
  exports.Set("connReqConnect", Napi::Function::New(env, ConnReqConnect, "connReqConnect"));
  exports.Set("connReqDelete", Napi::Function::New(env, ConnReqDelete, "connReqDelete"));
}

}  // namespace rdma
