// Connections (rpma_conn_*) and their completions. Every wait (a connection event, completions)
// watches a librpma file descriptor through a Poller and answers a JavaScript callback; the
// TypeScript driver turns each into an interruptible Effect.async whose canceller calls cancelWait.
#include <infiniband/verbs.h>
#include <librpma.h>
#include <napi.h>

#include <arpa/inet.h>

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

namespace {

const char* EventName(rpma_conn_event event) {
  switch (event) {
    case RPMA_CONN_ESTABLISHED:
      return "ESTABLISHED";
    case RPMA_CONN_CLOSED:
      return "CLOSED";
    case RPMA_CONN_LOST:
      return "LOST";
    case RPMA_CONN_REJECTED:
      return "REJECTED";
    case RPMA_CONN_UNREACHABLE:
      return "UNREACHABLE";
    default:
      return "UNDEFINED";
  }
}

}  // namespace

// ---- connections ----

ConnState::ConnState()
    : events([this](Napi::Env env, int status) { OnEvent(env, status); }),
      completions([this](Napi::Env env, int status) { OnCompletion(env, status, cq); }),
      receives([this](Napi::Env env, int status) { OnCompletion(env, status, rcq); }) {}

ConnState::~ConnState() { Delete(); }

int ConnState::Delete() {
  // Out of epoll before librpma closes the descriptors.
  events.Close();
  completions.Close();
  receives.Close();
  if (conn == nullptr) return 0;
  int code = rpma_conn_delete(&conn);  // frees it even when it fails
  conn = nullptr;
  cq = nullptr;
  rcq = nullptr;
  Count(Kind::Conn, -1);
  if (peer) peer->users--;
  if (srq) srq->users--;
  // The queue pair is gone: the device no longer touches the regions of requests in flight.
  ReleaseAll(posted);
  return code;
}

int ConnState::Drain(Napi::Env env, Napi::Array out, uint32_t* count) {
  int code = DrainOne(env, cq, out, count);
  if (code == 0 && rcq != nullptr) code = DrainOne(env, rcq, out, count);
  return code;
}

int ConnState::DrainOne(Napi::Env env, rpma_cq* from, Napi::Array out, uint32_t* count) {
  constexpr int kBatch = 32;
  ibv_wc wc[kBatch];
  for (;;) {
    int got = 0;
    int code = rpma_cq_get_wc(from, kBatch, wc, &got);
    if (code == RPMA_E_NO_COMPLETION) return 0;
    if (code != 0) return code;
    for (int i = 0; i < got; i++) {
      auto found = posted.find(wc[i].wr_id);
      if (found == posted.end()) continue;  // not a request of ours
      if (!found->second.recv) {
        // A send-queue request completed: the unsignalled ones posted before it have succeeded.
        for (auto it = posted.begin(); it != found;) {
          if (it->second.recv || it->second.signalled) {
            ++it;
            continue;
          }
          if (it->second.region) it->second.region->in_flight--;
          it = posted.erase(it);
        }
      }
      Posted request = std::move(found->second);
      posted.erase(found);
      if (request.region) request.region->in_flight--;
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
      out.Set((*count)++, completion);
    }
    if (got < kBatch) return 0;
  }
}

void ConnState::OnEvent(Napi::Env env, int status) {
  std::shared_ptr<ConnState> keep = shared_from_this();  // a callback may delete it
  if (status < 0) return FailAll(env, events, "rpma_conn_next_event", status);
  while (conn != nullptr && !events.waiters.empty()) {
    int fd = -1;
    if (rpma_conn_get_event_fd(conn, &fd) != 0 || !Readable(fd)) break;
    rpma_conn_event event = RPMA_CONN_UNDEFINED;
    ClearLog();
    errno = 0;
    int code = rpma_conn_next_event(conn, &event);
    int errnum = errno;
    std::string log = TakeLog();
    if (NothingYet(code, errnum)) break;
    Waiter waiter = std::move(events.waiters.front());
    events.waiters.pop_front();
    if (code != 0) {
      Deliver(env, waiter, RpmaErrorValue(env, code, "rpma_conn_next_event", log), nullptr, true);
    } else {
      Deliver(env, waiter, nullptr, Napi::String::New(env, EventName(event)), true);
    }
  }
  events.PauseIfIdle();
}

void ConnState::OnCompletion(Napi::Env env, int status, rpma_cq* fired) {
  std::shared_ptr<ConnState> keep = shared_from_this();
  if (status < 0) return FailAll(env, completions, "rpma_cq_wait", status);
  while (conn != nullptr && fired != nullptr && !completions.waiters.empty()) {
    int fd = -1;
    if (rpma_cq_get_fd(fired, &fd) != 0 || !Readable(fd)) break;
    // Takes the channel's event, acknowledges it and re-arms the queue; only then drain, so that a
    // completion arriving after the drain raises a new event. A shared channel is read through the
    // connection (rpma_cq_wait refuses it); both queues are drained either way.
    ClearLog();
    rpma_cq* which = nullptr;
    int code = shared_channel ? rpma_conn_wait(conn, 0, &which, nullptr) : rpma_cq_wait(fired);
    if (code == RPMA_E_NO_COMPLETION) break;  // nothing to read after all
    if (code == 0) {
      Napi::Array out = Napi::Array::New(env);
      uint32_t count = 0;
      code = Drain(env, out, &count);
      if (code == 0 && count == 0) continue;  // already taken by an earlier drain: wait on
      Waiter waiter = std::move(completions.waiters.front());
      completions.waiters.pop_front();
      std::string log = TakeLog();
      if (count != 0) {
        Deliver(env, waiter, nullptr, out, true);
      } else {
        Deliver(env, waiter, RpmaErrorValue(env, code, "rpma_cq_get_wc", log), nullptr, true);
      }
      continue;
    }
    std::string log = TakeLog();
    Waiter waiter = std::move(completions.waiters.front());
    completions.waiters.pop_front();
    Deliver(env, waiter, RpmaErrorValue(env, code, "rpma_cq_wait", log), nullptr, true);
  }
  completions.PauseIfIdle();
  if (completions.waiters.empty()) receives.Pause();
}

namespace {

Napi::Value ConnNextEvent(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Call call(env, "rpma_conn_next_event", Domain::Rpma);
  Conn* handle = Open<Conn>(call, info[0]);
  if (handle == nullptr || !IsCallback(call, info[1])) return env.Undefined();
  int fd = -1;
  int code = rpma_conn_get_event_fd(handle->state->conn, &fd);
  if (code != 0) return call.Fail(code, "rpma_conn_get_event_fd");
  return StartWait(call, handle->state->events, fd, info[1], nullptr, false);
}

Napi::Value ConnPrivateData(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Call call(env, "rpma_conn_get_private_data", Domain::Rpma);
  Conn* handle = Open<Conn>(call, info[0]);
  if (handle == nullptr) return env.Undefined();
  rpma_conn_private_data pdata{};
  int code = rpma_conn_get_private_data(handle->state->conn, &pdata);
  if (code != 0) return call.Fail(code);
  return CopyBytes(env, pdata.ptr, pdata.len);
}

// rpma_peer_cfg_get_descriptor of a peer cfg with direct_write_to_pmem as given.
Napi::Value PeerCfgDescriptor(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Call call(env, "rpma_peer_cfg_get_descriptor", Domain::Rpma);
  if (!info[0].IsBoolean()) return call.Invalid("directWriteToPmem must be a boolean");
  rpma_peer_cfg* pcfg = nullptr;
  int code = rpma_peer_cfg_new(&pcfg);
  if (code != 0) return call.Fail(code, "rpma_peer_cfg_new");
  std::size_t size = 0;
  code = rpma_peer_cfg_set_direct_write_to_pmem(pcfg, info[0].As<Napi::Boolean>().Value());
  if (code == 0) code = rpma_peer_cfg_get_descriptor_size(pcfg, &size);
  std::vector<uint8_t> bytes(size);
  if (code == 0) code = rpma_peer_cfg_get_descriptor(pcfg, bytes.data());
  rpma_peer_cfg_delete(&pcfg);
  if (code != 0) return call.Fail(code);
  return CopyBytes(env, bytes.data(), bytes.size());
}

// rpma_peer_cfg_from_descriptor + rpma_conn_apply_remote_peer_cfg.
Napi::Value ConnApplyRemotePeerCfg(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Call call(env, "rpma_conn_apply_remote_peer_cfg", Domain::Rpma);
  if (!info[1].IsTypedArray() || info[1].As<Napi::TypedArray>().TypedArrayType() != napi_uint8_array) {
    return call.Invalid("the peer configuration descriptor must be a Uint8Array");
  }
  Napi::Uint8Array data = info[1].As<Napi::Uint8Array>();
  std::vector<uint8_t> bytes(data.Data(), data.Data() + data.ByteLength());
  Conn* handle = Open<Conn>(call, info[0]);
  if (handle == nullptr) return env.Undefined();
  rpma_peer_cfg* pcfg = nullptr;
  int code = rpma_peer_cfg_from_descriptor(bytes.data(), bytes.size(), &pcfg);
  if (code != 0) return call.Fail(code, "rpma_peer_cfg_from_descriptor");
  code = rpma_conn_apply_remote_peer_cfg(handle->state->conn, pcfg);
  rpma_peer_cfg_delete(&pcfg);
  if (code != 0) return call.Fail(code);
  return env.Undefined();
}

Napi::Value ConnDisconnect(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Call call(env, "rpma_conn_disconnect", Domain::Rpma);
  Conn* handle = Open<Conn>(call, info[0]);
  if (handle == nullptr) return env.Undefined();
  ClearLog();
  int code = rpma_conn_disconnect(handle->state->conn);
  std::string log = TakeLog();
  if (code != 0) return call.Fail(code, log);
  return env.Undefined();
}

Napi::Value ConnDelete(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Call call(env, "rpma_conn_delete", Domain::Rpma);
  Conn* handle = Open<Conn>(call, info[0]);
  if (handle == nullptr) return env.Undefined();
  std::shared_ptr<ConnState> state = handle->state;
  std::deque<Waiter> events, completions;
  events.swap(state->events.waiters);
  completions.swap(state->completions.waiters);
  ClearLog();
  int code = state->Delete();
  std::string log = TakeLog();
  for (Waiter& waiter : events) {
    Deliver(env, waiter, RpmaErrorValue(env, RPMA_E_INVAL, "rpma_conn_next_event", "the connection was deleted"), nullptr,
            false);
  }
  for (Waiter& waiter : completions) {
    Deliver(env, waiter, RpmaErrorValue(env, RPMA_E_INVAL, "rpma_cq_wait", "the connection was deleted"), nullptr, false);
  }
  if (code != 0) return call.Fail(code, Join(log, "the connection is gone"));
  return env.Undefined();
}

Napi::Value ConnPollCompletions(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Call call(env, "rpma_cq_get_wc", Domain::Rpma);
  Conn* handle = Open<Conn>(call, info[0]);
  if (handle == nullptr) return env.Undefined();
  Napi::Array out = Napi::Array::New(env);
  uint32_t count = 0;
  ClearLog();
  int code = handle->state->Drain(env, out, &count);
  std::string log = TakeLog();
  if (code != 0 && count == 0) return call.Fail(code, log);
  return out;
}

Napi::Value ConnWaitCompletions(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Call call(env, "rpma_cq_wait", Domain::Rpma);
  Conn* handle = Open<Conn>(call, info[0]);
  if (handle == nullptr || !IsCallback(call, info[1])) return env.Undefined();
  ConnState& state = *handle->state;
  int fd = -1;
  int code = rpma_cq_get_fd(state.cq, &fd);
  if (code != 0) return call.Fail(code, "rpma_cq_get_fd");
  // A receive CQ with a channel of its own is watched too; its events serve the same waiters.
  int rfd = -1;
  if (state.rcq != nullptr && !state.shared_channel && (code = rpma_cq_get_fd(state.rcq, &rfd)) != 0) {
    return call.Fail(code, "rpma_cq_get_fd");
  }
  Napi::Value id = StartWait(call, state.completions, fd, info[1], nullptr, false);
  if (rfd >= 0 && id.IsNumber()) {
    int errnum = state.receives.Watch(env, rfd);
    if (errnum != 0) {
      state.completions.Cancel(id.As<Napi::Number>().DoubleValue());
      return call.Fail(RPMA_E_PROVIDER, std::string("cannot watch the receive CQ's channel: ") + std::strerror(errnum));
    }
  }
  return id;
}

// Never throws: an Effect canceller calls it, and a handle closed since has no waiters left.
Napi::Value CancelWait(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Kind kind;
  if (!KindOf(info[0], &kind) || !info[1].IsNumber()) return Napi::Boolean::New(env, false);
  double id = info[1].As<Napi::Number>().DoubleValue();
  bool found = false;
  if (kind == Kind::Endpoint) {
    auto* handle = Napi::ObjectWrap<Endpoint>::Unwrap(info[0].As<Napi::Object>());
    if (handle->state) found = handle->state->requests.Cancel(id);
  } else if (kind == Kind::Conn) {
    auto* handle = Napi::ObjectWrap<Conn>::Unwrap(info[0].As<Napi::Object>());
    if (handle->state) found = handle->state->events.Cancel(id) || handle->state->completions.Cancel(id);
  }
  return Napi::Boolean::New(env, found);
}

}  // namespace

void RegisterConn(Napi::Env env, Napi::Object exports) {
  RegisterEndpoint(env, exports);
  RegisterConnReq(env, exports);
  exports.Set("connNextEvent", Napi::Function::New(env, ConnNextEvent, "connNextEvent"));
  exports.Set("connPrivateData", Napi::Function::New(env, ConnPrivateData, "connPrivateData"));
  exports.Set("connDisconnect", Napi::Function::New(env, ConnDisconnect, "connDisconnect"));
  exports.Set("peerCfgDescriptor", Napi::Function::New(env, PeerCfgDescriptor, "peerCfgDescriptor"));
  exports.Set("connApplyRemotePeerCfg", Napi::Function::New(env, ConnApplyRemotePeerCfg, "connApplyRemotePeerCfg"));
  exports.Set("connDelete", Napi::Function::New(env, ConnDelete, "connDelete"));
  RegisterPost(env, exports);
  exports.Set("connPollCompletions", Napi::Function::New(env, ConnPollCompletions, "connPollCompletions"));
  exports.Set("connWaitCompletions", Napi::Function::New(env, ConnWaitCompletions, "connWaitCompletions"));
  exports.Set("cancelWait", Napi::Function::New(env, CancelWait, "cancelWait"));
}

}  // namespace rdma
