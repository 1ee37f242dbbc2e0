// Connections (rpma_conn_*): their events, private data, peer configuration, disconnect and
// delete. The wait for an event watches the connection's event channel through a Poller and
// answers a JavaScript callback; the TypeScript driver turns it into an interruptible
// Effect.async whose canceller calls cancelWait. Work requests are posted in post.cc; completions
// are read and waited for in completions.cc, the same way as a shared receive queue's.
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

ConnState::ConnState() : events([this](Napi::Env env, int status) { OnEvent(env, status); }) {}

ConnState::~ConnState() { Delete(); }

int ConnState::Delete() {
  // Out of epoll before librpma closes the descriptors.
  events.Close();
  StopWatching();
  if (conn == nullptr) return 0;
  int code = rpma_conn_delete(&conn);  // frees it even when it fails
  conn = nullptr;
  Count(Kind::Conn, -1);
  if (peer) peer->users--;
  if (srq) srq->users--;
  // The queue pair is gone: the device no longer touches the regions of requests in flight.
  posted.clear();
  return code;
}

void ConnState::OnEvent(Napi::Env env, int status) {
  std::shared_ptr<CompletionQueues> keep = shared_from_this();  // a callback may delete it
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
  std::deque<Waiter> events;
  events.swap(state->events.waiters);
  std::deque<Waiter> completions = state->TakeWaiters();
  ClearLog();
  int code = state->Delete();
  std::string log = TakeLog();
  for (Waiter& waiter : events) {
    Deliver(env, waiter, RpmaErrorValue(env, RPMA_E_INVAL, "rpma_conn_next_event", "the connection was deleted"), nullptr,
            false);
  }
  CompletionQueues::FailWaiters(env, completions, "the connection was deleted");
  if (code != 0) return call.Fail(code, Join(log, "the connection is gone"));
  return env.Undefined();
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
  RegisterPostWindow(env, exports);
  RegisterCompletions(env, exports);
}

}  // namespace rdma
