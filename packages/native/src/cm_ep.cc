// librdmacm's verbs API, the set-up (see cm_ep.h): endpoints made by resolving an address
// (rdma_resolve_addr, rdma_resolve_route), listeners (rdma_listen) and the requests they hand out,
// connect / accept / reject / disconnect and the events that follow, and their release.
//
// Every call here returns at once; what the network answers comes as an event on the id's channel,
// read from the event loop (Poller) with the channel's descriptor non-blocking. The waits' bounds
// (timeoutMs) are the driver's (internal/cmEndpoint.ts), besides the resolutions' own.
#include "cm_ep.h"

#include <arpa/inet.h>
#include <infiniband/verbs.h>
#include <netdb.h>
#include <rdma/rdma_cma.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <string>

#include "conn_common.h"
#include "errors.h"
#include "private_data.h"

namespace rdma {

using conn::Integer;

namespace {

// What the CM says when the other side's application rejected (IB_CM_REJ_CONSUMER_DEFINED);
// any other reason (8: no one listens on that service id) means it could not be reached.
constexpr int kConsumerRejected = 28;
using private_data::kAcceptLimit;
using private_data::kConnectLimit;
using private_data::kRejectLimit;
// An accept of a request whose client has gone: rdma_accept's EINVAL (the CM already had the
// client's REJ) or the REJ / error that ends the accept's wait, as the driver's one errno.
constexpr const char* kClientGone =
    "the client that asked has gone (it gave up, destroyed its endpoint or was killed): the request is spent; "
    "take the next one (cmGetRequest)";

int LastErrno(int fallback) { return errno != 0 ? errno : fallback; }

const char* EventName(rdma_cm_event_type type) {
  switch (type) {
    case RDMA_CM_EVENT_DISCONNECTED: return "DISCONNECTED";
    case RDMA_CM_EVENT_DEVICE_REMOVAL: return "DEVICE_REMOVAL";
    case RDMA_CM_EVENT_TIMEWAIT_EXIT: return "TIMEWAIT_EXIT";
    default: return "OTHER";
  }
}

}  // namespace

Napi::Value ErrnoValue(Napi::Env env, int errnum, const char* operation, const std::string& detail) {
  return MakeError(env, Domain::Errno, errnum, operation, detail).Value();
}

// ---- endpoint state ----

CmEpState::CmEpState()
    : event_poller([this](Napi::Env env, int status) { OnEvent(env, status); }),
      completions([this](Napi::Env env, int status) { OnCompletion(env, status); }) {}

CmEpState::~CmEpState() { Destroy(nullptr); }  // GC backstop

CmEp::~CmEp() {
  // Collected without cmEpDestroy: released now unless regions (which hold the state) remain.
  if (state && state->regions == 0) state->Destroy(nullptr);
}

int CmEpState::MakeQueuePair(const char** operation) {
  ibv_context* verbs = id->verbs;
  if (verbs == nullptr) return *operation = "rdma_resolve_addr", ENODEV;
  errno = 0;
  if ((pd = ibv_alloc_pd(verbs)) == nullptr) return *operation = "ibv_alloc_pd", LastErrno(ENOMEM);
  if ((comp_channel = ibv_create_comp_channel(verbs)) == nullptr) return *operation = "ibv_create_comp_channel", LastErrno(ENOMEM);
  send_cq = ibv_create_cq(verbs, static_cast<int>(std::max<uint32_t>(config.max_send_wr, 1)), nullptr, comp_channel, 0);
  if (send_cq == nullptr) return *operation = "ibv_create_cq", LastErrno(ENOMEM);
  recv_cq = ibv_create_cq(verbs, static_cast<int>(std::max<uint32_t>(config.max_recv_wr, 1)), nullptr, comp_channel, 0);
  if (recv_cq == nullptr) return *operation = "ibv_create_cq", LastErrno(ENOMEM);
  int result = ibv_req_notify_cq(send_cq, 0);
  if (result == 0) result = ibv_req_notify_cq(recv_cq, 0);
  if (result != 0) return *operation = "ibv_req_notify_cq", result;
  ibv_qp_init_attr attr{};
  attr.send_cq = send_cq;
  attr.recv_cq = recv_cq;
  attr.qp_type = IBV_QPT_RC;
  attr.sq_sig_all = 0;  // each request says whether it is signalled
  attr.cap.max_send_wr = config.max_send_wr;
  attr.cap.max_recv_wr = config.max_recv_wr;
  attr.cap.max_send_sge = config.max_send_sge;
  attr.cap.max_recv_sge = config.max_recv_sge;
  attr.cap.max_inline_data = config.max_inline_data;
  id->pd = pd;  // rdma_reg_* register with id->pd
  errno = 0;
  if (rdma_create_qp(id, pd, &attr) != 0) return *operation = "rdma_create_qp", LastErrno(EINVAL);
  has_qp = true;
  config.max_inline_data = attr.cap.max_inline_data;  // what the device granted
  return 0;
}

int CmEpState::Destroy(napi_env env) {
  if (id == nullptr) return 0;
  phase = Phase::Closed;
  // Out of epoll before the descriptors close; the waiters hear ECANCELED.
  std::deque<Waiter> waiting;
  for (Poller* poller : {&event_poller, &completions}) {
    for (Waiter& waiter : poller->waiters) waiting.push_back(std::move(waiter));
    poller->waiters.clear();
  }
  event_poller.Close();
  completions.Close();
  int result = 0;
  auto note = [&result](int code) {
    if (result == 0 && code != 0) result = code;
  };
  if (has_qp) rdma_destroy_qp(id);  // ibv_destroy_qp: the device reads and writes no region after it
  has_qp = false;
  posted.clear();  // the regions it held, deregistered now if their handles are closed
  recvs_posted = sends_posted = 0;
  if (send_cq != nullptr) note(ibv_destroy_cq(send_cq));
  if (recv_cq != nullptr) note(ibv_destroy_cq(recv_cq));
  if (comp_channel != nullptr) note(ibv_destroy_comp_channel(comp_channel));
  send_cq = recv_cq = nullptr;
  comp_channel = nullptr;
  id->pd = nullptr;
  if (pd != nullptr) note(ibv_dealloc_pd(pd));
  pd = nullptr;
  // Every event taken from the channel was acknowledged at once: rdma_destroy_id does not wait.
  errno = 0;
  if (rdma_destroy_id(id) != 0) note(LastErrno(EINVAL));
  id = nullptr;
  if (channel != nullptr) rdma_destroy_event_channel(channel);
  channel = nullptr;
  if (listener) listener->endpoints--;
  listener.reset();
  Count(Kind::CmEp, -1);
  if (env != nullptr) {
    Napi::Env js(env);
    for (Waiter& waiter : waiting) {
      Deliver(js, waiter, ErrnoValue(js, ECANCELED, "rdma_destroy_ep", "the endpoint was destroyed"), nullptr, false);
    }
  }
  return result;
}

void CmEpState::Settle(Napi::Env env, napi_value error) {
  if (setup_id == 0) return;
  double wanted = setup_id;
  setup_id = 0;
  for (auto it = event_poller.waiters.begin(); it != event_poller.waiters.end(); ++it) {
    if (it->id != wanted) continue;
    Waiter waiter = std::move(*it);
    event_poller.waiters.erase(it);
    Deliver(env, waiter, error, error == nullptr ? static_cast<napi_value>(env.Undefined()) : nullptr, true);
    return;
  }
}

void CmEpState::HandleEvent(Napi::Env env, rdma_cm_event_type type, int status) {
  // An error status is a negative errno (ETIMEDOUT when a resolution ran out of time).
  int reason = status < 0 ? -status : 0;
  switch (type) {
    case RDMA_CM_EVENT_ADDR_RESOLVED:
      errno = 0;
      if (rdma_resolve_route(id, config.timeout_ms) != 0) {
        Settle(env, ErrnoValue(env, LastErrno(EINVAL), "rdma_resolve_route", ""));
      }
      return;
    case RDMA_CM_EVENT_ROUTE_RESOLVED: {
      const char* operation = "rdma_create_qp";
      int errnum = MakeQueuePair(&operation);
      if (errnum != 0) {
        Settle(env, ErrnoValue(env, errnum, operation, "setting up the endpoint's queue pair (`ibv_devinfo -v` shows the device's limits)"));
        return;
      }
      phase = Phase::Ready;
      Settle(env, nullptr);
      return;
    }
    case RDMA_CM_EVENT_ADDR_ERROR:
    case RDMA_CM_EVENT_ROUTE_ERROR: {
      const char* operation = type == RDMA_CM_EVENT_ADDR_ERROR ? "rdma_resolve_addr" : "rdma_resolve_route";
      Settle(env, ErrnoValue(env, reason != 0 ? reason : EHOSTUNREACH, operation,
                             "no RDMA route to the address: check that an RDMA device is up on that network "
                             "(`ibv_devinfo`, `rdma link`)"));
      return;
    }
    case RDMA_CM_EVENT_ESTABLISHED:
      phase = Phase::Established;
      Settle(env, nullptr);
      return;
    case RDMA_CM_EVENT_REJECTED:
      if (phase == Phase::Accepting) {
        phase = Phase::Rejected;
        Settle(env, ErrnoValue(env, ECONNABORTED, "rdma_accept", kClientGone));
        return;
      }
      phase = Phase::Rejected;
      if (status == kConsumerRejected) {
        Settle(env, ErrnoValue(env, ECONNREFUSED, "rdma_connect", "the other side rejected the connection (its private data: cmPrivateData)"));
      } else {
        Settle(env, ErrnoValue(env, EHOSTUNREACH, "rdma_connect",
                               "no one listens on that address and port (the CM's rejection reason " + std::to_string(status) + ")"));
      }
      return;
    case RDMA_CM_EVENT_UNREACHABLE:
    case RDMA_CM_EVENT_CONNECT_ERROR: {
      bool accepting = phase == Phase::Accepting;
      phase = Phase::Rejected;
      if (accepting) {
        Settle(env, ErrnoValue(env, ECONNABORTED, "rdma_accept", kClientGone));
      } else {
        Settle(env, ErrnoValue(env, EHOSTUNREACH, "rdma_connect",
                               reason == ETIMEDOUT ? "the other side did not answer" : "the other side cannot be reached"));
      }
      return;
    }
    default:
      break;
  }
  if (setup_id != 0 && phase == Phase::Accepting && type == RDMA_CM_EVENT_DISCONNECTED) {
    phase = Phase::Rejected;
    Settle(env, ErrnoValue(env, ECONNABORTED, "rdma_accept", kClientGone));
    return;
  }
  if (setup_id != 0) {
    Settle(env, ErrnoValue(env, type == RDMA_CM_EVENT_DEVICE_REMOVAL ? ENODEV : ECONNRESET, "rdma_cm",
                           std::string("the connection ended during its set-up: ") + EventName(type)));
  }
  events.push_back(EventName(type));
}

void CmEpState::OnEvent(Napi::Env env, int status) {
  std::shared_ptr<CmEpState> keep = shared_from_this();  // a callback may destroy the endpoint
  if (status < 0) {
    conn::FailAll(env, event_poller, "rdma_get_cm_event", status, Domain::Errno);
    setup_id = 0;
    return;
  }
  while (channel != nullptr && !event_poller.waiters.empty()) {
    // Events of an established endpoint for its waiters first.
    if (!events.empty() && setup_id == 0) {
      Waiter waiter = std::move(event_poller.waiters.front());
      event_poller.waiters.pop_front();
      std::string name = events.front();
      events.pop_front();
      Deliver(env, waiter, nullptr, Napi::String::New(env, name), true);
      continue;
    }
    rdma_cm_event* event = nullptr;
    errno = 0;
    if (rdma_get_cm_event(channel, &event) != 0) {
      int errnum = LastErrno(EIO);
      if (errnum == EAGAIN || errnum == EWOULDBLOCK) break;
      Napi::Value error = ErrnoValue(env, errnum, "rdma_get_cm_event", "");
      std::deque<Waiter> waiters;
      waiters.swap(event_poller.waiters);
      setup_id = 0;
      for (Waiter& waiter : waiters) Deliver(env, waiter, error, nullptr, true);
      break;
    }
    rdma_cm_event_type type = event->event;
    int event_status = event->status;
    if (type == RDMA_CM_EVENT_ESTABLISHED || type == RDMA_CM_EVENT_REJECTED || type == RDMA_CM_EVENT_CONNECT_RESPONSE) {
      if (listener == nullptr || type == RDMA_CM_EVENT_REJECTED) {
        const auto* bytes = static_cast<const uint8_t*>(event->param.conn.private_data);
        private_data.assign(bytes, bytes == nullptr ? bytes : bytes + event->param.conn.private_data_len);
      }
    }
    rdma_ack_cm_event(event);
    HandleEvent(env, type, event_status);
  }
  event_poller.PauseIfIdle();
}

// ---- listener state ----

CmListenerState::CmListenerState() : requests([this](Napi::Env env, int status) { OnEvent(env, status); }) {}

void CmListenerState::Destroy(napi_env env) {
  if (id == nullptr) return;
  std::deque<Waiter> waiters;
  waiters.swap(requests.waiters);
  requests.Close();
  // Requests not yet taken from the channel are rejected by the kernel with their listener.
  rdma_destroy_id(id);
  id = nullptr;
  if (channel != nullptr) rdma_destroy_event_channel(channel);
  channel = nullptr;
  Count(Kind::CmListener, -1);
  if (env == nullptr) return;
  Napi::Env js(env);
  for (Waiter& waiter : waiters) {
    Deliver(js, waiter, ErrnoValue(js, ECANCELED, "rdma_get_request", "the listener was destroyed"), nullptr, false);
  }
}

namespace {

// A request's id as an endpoint: its own channel (rdma_migrate_id, after its event is
// acknowledged), its queue pair on a new protection domain. Returns the handle, or an empty value
// and `*error` set; the request is rejected and destroyed then.
Napi::Value TakeRequest(Napi::Env env, const std::shared_ptr<CmListenerState>& listener, rdma_cm_id* child,
                        std::vector<uint8_t> private_data, uint8_t initiator_depth, uint8_t responder_resources,
                        Napi::Value* error) {
  auto state = std::make_shared<CmEpState>();
  state->id = child;
  state->config = listener->config;
  state->private_data = std::move(private_data);
  state->initiator_depth = initiator_depth;
  state->responder_resources = responder_resources;
  state->listener = listener;
  listener->endpoints++;
  Count(Kind::CmEp, +1);
  const char* operation = "rdma_create_event_channel";
  int errnum = 0;
  errno = 0;
  if ((state->channel = rdma_create_event_channel()) == nullptr) {
    errnum = LastErrno(ENOMEM);
  } else if (rdma_migrate_id(child, state->channel) != 0) {
    operation = "rdma_migrate_id";
    errnum = LastErrno(EINVAL);
  } else {
    errnum = state->MakeQueuePair(&operation);
  }
  CmEp* handle = nullptr;
  Napi::Object object;
  if (errnum == 0) {
    object = CmEp::New(env, &handle);
    if (handle == nullptr) operation = "rdma_get_request", errnum = ENOMEM;
  }
  if (errnum != 0) {
    rdma_reject(child, nullptr, 0);  // its client hears at once instead of waiting out its timeout
    state->Destroy(nullptr);
    *error = ErrnoValue(env, errnum, operation, "setting up an incoming request's queue pair; the request was rejected");
    return Napi::Value();
  }
  state->phase = CmEpState::Phase::Ready;
  handle->state = std::move(state);
  return object;
}

}  // namespace

void CmListenerState::OnEvent(Napi::Env env, int status) {
  std::shared_ptr<CmListenerState> keep = shared_from_this();
  if (status < 0) {
    conn::FailAll(env, requests, "rdma_get_request", status, Domain::Errno);
    return;
  }
  while (channel != nullptr && !requests.waiters.empty()) {
    rdma_cm_event* event = nullptr;
    errno = 0;
    if (rdma_get_cm_event(channel, &event) != 0) {
      int errnum = LastErrno(EIO);
      if (errnum == EAGAIN || errnum == EWOULDBLOCK) break;
      Waiter waiter = std::move(requests.waiters.front());
      requests.waiters.pop_front();
      Deliver(env, waiter, ErrnoValue(env, errnum, "rdma_get_request", ""), nullptr, true);
      continue;
    }
    if (event->event != RDMA_CM_EVENT_CONNECT_REQUEST) {
      rdma_ack_cm_event(event);  // the listener's own (a device removal, say): nothing to do
      continue;
    }
    rdma_cm_id* child = event->id;
    const auto* bytes = static_cast<const uint8_t*>(event->param.conn.private_data);
    std::vector<uint8_t> data(bytes, bytes == nullptr ? bytes : bytes + event->param.conn.private_data_len);
    uint8_t initiator_depth = event->param.conn.initiator_depth;
    uint8_t responder_resources = event->param.conn.responder_resources;
    rdma_ack_cm_event(event);
    Napi::Value error;
    Napi::Value endpoint = TakeRequest(env, keep, child, std::move(data), initiator_depth, responder_resources, &error);
    Waiter waiter = std::move(requests.waiters.front());
    requests.waiters.pop_front();
    if (endpoint.IsEmpty()) {
      Deliver(env, waiter, error.IsEmpty() ? nullptr : static_cast<napi_value>(error), nullptr, true);
    } else {
      Deliver(env, waiter, nullptr, endpoint, true);
    }
  }
  requests.PauseIfIdle();
}

namespace {

// ---- arguments ----

bool ParseEpConfig(const Call& call, Napi::Value value, CmEpConfig* out) {
  if (!value.IsObject()) return call.Invalid("config must be an object"), false;
  Napi::Object object = value.As<Napi::Object>();
  const char* const names[6] = {"timeoutMs", "maxSendWr", "maxRecvWr", "maxSendSge", "maxRecvSge", "maxInlineData"};
  Napi::Value fields[6];
  for (int i = 0; i < 6; i++) {
    fields[i] = object.Get(names[i]);
    if (call.Env().IsExceptionPending()) return call.Invalid(std::string("reading config.") + names[i] + " threw"), false;
  }
  double numbers[6];
  for (int i = 0; i < 6; i++) {
    if (!Integer(call, fields[i], names[i], i == 0 ? INT_MAX : UINT32_MAX, &numbers[i])) return false;
  }
  for (int i = 1; i < 5; i++) {
    if (numbers[i] == 0) return call.Invalid(std::string(names[i]) + " must be at least 1"), false;
  }
  out->timeout_ms = static_cast<int>(numbers[0]);
  out->max_send_wr = static_cast<uint32_t>(numbers[1]);
  out->max_recv_wr = static_cast<uint32_t>(numbers[2]);
  out->max_send_sge = static_cast<uint32_t>(numbers[3]);
  out->max_recv_sge = static_cast<uint32_t>(numbers[4]);
  out->max_inline_data = static_cast<uint32_t>(numbers[5]);
  // rdma_conn_param's fields, each optional (undefined: the default).
  const char* const params[4] = {"retryCount", "rnrRetryCount", "responderResources", "initiatorDepth"};
  const double most[4] = {7, 7, 255, 255};
  int values[4] = {out->retry_count, out->rnr_retry_count, out->responder_resources, out->initiator_depth};
  for (int i = 0; i < 4; i++) {
    Napi::Value field = object.Get(params[i]);
    if (call.Env().IsExceptionPending()) return call.Invalid(std::string("reading config.") + params[i] + " threw"), false;
    if (field.IsUndefined()) continue;
    double number;
    if (!Integer(call, field, params[i], most[i], &number)) return false;
    values[i] = static_cast<int>(number);
  }
  out->retry_count = static_cast<uint8_t>(values[0]);
  out->rnr_retry_count = static_cast<uint8_t>(values[1]);
  out->responder_resources = values[2];
  out->initiator_depth = values[3];
  return true;
}

// A numeric IPv4 or IPv6 address and a port (getaddrinfo with AI_NUMERICHOST never does I/O; the
// driver resolves names before calling).
bool ParseAddress(const Call& call, Napi::Value address, Napi::Value port, bool passive, sockaddr_storage* out) {
  if (!address.IsString()) return call.Invalid(address.IsNull() || address.IsUndefined() ? "node is NULL" : "address must be a string"), false;
  double number;
  if (!Integer(call, port, "port", 65535, &number)) return false;
  if (!passive && number == 0) return call.Invalid("port 0: give the port the other side listens on"), false;
  std::string text = address.As<Napi::String>().Utf8Value();
  addrinfo hints{};
  hints.ai_flags = AI_NUMERICHOST | AI_NUMERICSERV | AI_PASSIVE;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* info = nullptr;
  std::string service = std::to_string(static_cast<int>(number));
  int ret = getaddrinfo(text.c_str(), service.c_str(), &hints, &info);
  if (ret != 0 || info == nullptr) {
    return call.Fail(EADDRNOTAVAIL, "\"" + text + "\" is not a numeric IPv4 or IPv6 address"), false;
  }
  std::memset(out, 0, sizeof *out);
  std::memcpy(out, info->ai_addr, std::min<std::size_t>(info->ai_addrlen, sizeof *out));
  freeaddrinfo(info);
  return true;
}

// Private data of at most `limit` bytes, or none (undefined / null).
bool ParsePrivateData(const Call& call, Napi::Value value, std::size_t limit, std::vector<uint8_t>* out) {
  out->clear();
  if (value.IsUndefined() || value.IsNull()) return true;
  if (!value.IsTypedArray() || value.As<Napi::TypedArray>().TypedArrayType() != napi_uint8_array) {
    return call.Invalid("private data must be a Uint8Array"), false;
  }
  Napi::Uint8Array bytes = value.As<Napi::Uint8Array>();
  if (bytes.ByteLength() > limit) {
    return call.Invalid("private data is " + std::to_string(bytes.ByteLength()) + " bytes; rdma_cm on RoCE carries at most " +
                        std::to_string(limit) + " here"),
           false;
  }
  out->assign(bytes.Data(), bytes.Data() + bytes.ByteLength());
  return true;
}

// Starts a set-up wait on the endpoint's channel; returns its id, or throws.
Napi::Value StartSetup(const Call& call, CmEpState& state, Napi::Value callback) {
  Napi::Value id = conn::StartWait(call, state.event_poller, state.channel->fd, callback);
  if (id.IsNumber()) state.setup_id = id.As<Napi::Number>().DoubleValue();
  return id;
}

// The responder resources and initiator depth the endpoint offers: what its config asks, at most
// what the device allows (the device's maximum when the config asks nothing: librdmacm's default).
void Depths(const CmEpState& state, uint8_t* responder, uint8_t* initiator) {
  ibv_device_attr attr{};
  int device_responder = 1, device_initiator = 1;
  if (state.id->verbs != nullptr && ibv_query_device(state.id->verbs, &attr) == 0) {
    device_responder = std::min(attr.max_qp_rd_atom, 255);
    device_initiator = std::min(attr.max_qp_init_rd_atom, 255);
  }
  int asked_responder = state.config.responder_resources, asked_initiator = state.config.initiator_depth;
  *responder = static_cast<uint8_t>(asked_responder < 0 ? device_responder : std::min(asked_responder, device_responder));
  *initiator = static_cast<uint8_t>(asked_initiator < 0 ? device_initiator : std::min(asked_initiator, device_initiator));
}

// What rdma_connect and rdma_accept send: the private data, the depths, and the config's retries
// (7 and 7 unless asked: what librdmacm applies when given no parameters, and what its users expect).
rdma_conn_param ConnParam(const CmEpConfig& config, const std::vector<uint8_t>& data, uint8_t responder, uint8_t initiator) {
  rdma_conn_param param{};
  param.private_data = data.empty() ? nullptr : data.data();
  param.private_data_len = static_cast<uint8_t>(data.size());
  param.responder_resources = responder;
  param.initiator_depth = initiator;
  param.flow_control = 1;
  param.retry_count = config.retry_count;
  param.rnr_retry_count = config.rnr_retry_count;
  return param;
}

// An event channel and an asynchronous id on it, or a refusal through `call`.
bool OpenChannelAndId(const Call& call, rdma_event_channel** channel, rdma_cm_id** id) {
  errno = 0;
  if ((*channel = rdma_create_event_channel()) == nullptr) {
    return call.Fail(LastErrno(ENODEV), "rdma_create_event_channel: librdmacm cannot open the RDMA CM device: is an RDMA "
                                        "device (e.g. Soft-RoCE) and the rdma_ucm module present?"),
           false;
  }
  if (rdma_create_id(*channel, id, nullptr, RDMA_PS_TCP) != 0) {
    int errnum = LastErrno(ENODEV);
    rdma_destroy_event_channel(*channel);
    *channel = nullptr;
    *id = nullptr;
    return call.Fail(errnum, "rdma_create_id"), false;
  }
  return true;
}

// ---- exports ----

// cmEpCreate(address, port, config, callback): the endpoint's handle at once; the callback hears
// when its address and route are resolved and its queue pair made (or why not).
Napi::Value CmEpCreate(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Call call(env, "rdma_create_ep", Domain::Errno);
  sockaddr_storage address;
  CmEpConfig config;
  if (!ParseAddress(call, info[0], info[1], false, &address) || !ParseEpConfig(call, info[2], &config) ||
      !conn::IsCallback(call, info[3])) {
    return env.Undefined();
  }
  auto state = std::make_shared<CmEpState>();
  state->config = config;
  if (!OpenChannelAndId(call, &state->channel, &state->id)) return env.Undefined();
  Count(Kind::CmEp, +1);
  CmEp* handle;
  Napi::Object object = CmEp::New(env, &handle);
  if (handle == nullptr) {
    state->Destroy(nullptr);
    return call.Fail(ENOMEM, "cannot make a handle for the endpoint");
  }
  handle->state = state;
  errno = 0;
  if (rdma_resolve_addr(state->id, nullptr, reinterpret_cast<sockaddr*>(&address), config.timeout_ms) != 0) {
    int errnum = LastErrno(EINVAL);
    state->Destroy(nullptr);
    Call resolve(env, "rdma_resolve_addr", Domain::Errno);
    return resolve.Fail(errnum, "no RDMA device reaches the address (`ibv_devinfo`, `rdma link`)");
  }
  if (!StartSetup(call, *state, info[3]).IsNumber()) {
    state->Destroy(nullptr);
    return env.Undefined();
  }
  return object;
}

CmEp* OpenEp(const Call& call, Napi::Value value) { return Open<CmEp>(call, value); }

Napi::Value CmConnect(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Call call(env, "rdma_connect", Domain::Errno);
  CmEp* ep = OpenEp(call, info[0]);
  std::vector<uint8_t> data;
  if (ep == nullptr || !ParsePrivateData(call, info[1], kConnectLimit, &data) || !conn::IsCallback(call, info[2])) {
    return env.Undefined();
  }
  CmEpState& state = *ep->state;
  if (state.listener || state.phase != CmEpState::Phase::Ready) {
    return call.Invalid(state.listener ? "an incoming request is accepted (cmAccept), not connected"
                                       : "the endpoint is not ready to connect: it is connecting, connected or was refused");
  }
  uint8_t responder, initiator;
  Depths(state, &responder, &initiator);
  rdma_conn_param param = ConnParam(state.config, data, responder, initiator);
  errno = 0;
  if (rdma_connect(state.id, &param) != 0) return call.Fail(LastErrno(EINVAL));
  state.phase = CmEpState::Phase::Connecting;
  return StartSetup(call, state, info[2]);
}

Napi::Value CmListen(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Call call(env, "rdma_listen", Domain::Errno);
  sockaddr_storage address;
  CmEpConfig config;
  if (!ParseAddress(call, info[0], info[1], true, &address) || !ParseEpConfig(call, info[2], &config)) return env.Undefined();
  auto state = std::make_shared<CmListenerState>();
  state->config = config;
  if (!OpenChannelAndId(call, &state->channel, &state->id)) return env.Undefined();
  Count(Kind::CmListener, +1);
  const char* operation = nullptr;
  errno = 0;
  if (rdma_bind_addr(state->id, reinterpret_cast<sockaddr*>(&address)) != 0) {
    operation = "rdma_bind_addr";
  } else if (rdma_listen(state->id, 128) != 0) {
    operation = "rdma_listen";
  }
  if (operation != nullptr) {
    int errnum = LastErrno(EINVAL);
    state->Destroy(nullptr);
    Call failed(env, operation, Domain::Errno);
    return failed.Fail(errnum, errnum == EADDRINUSE ? "the port is in use" : errnum == EADDRNOTAVAIL || errnum == ENODEV
                                                                                 ? "no RDMA device has that address"
                                                                                 : "");
  }
  CmListener* handle;
  Napi::Object object = CmListener::New(env, &handle);
  if (handle == nullptr) {
    state->Destroy(nullptr);
    return call.Fail(ENOMEM, "cannot make a handle for the listener");
  }
  uint16_t port = ntohs(rdma_get_src_port(state->id));
  handle->state = std::move(state);
  Napi::Object result = Napi::Object::New(env);
  result.Set("handle", object);
  result.Set("port", Napi::Number::New(env, port));
  return result;
}

Napi::Value CmGetRequest(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Call call(env, "rdma_get_request", Domain::Errno);
  CmListener* listener = Open<CmListener>(call, info[0]);
  if (listener == nullptr || !conn::IsCallback(call, info[1])) return env.Undefined();
  return conn::StartWait(call, listener->state->requests, listener->state->channel->fd, info[1]);
}

Napi::Value CmPrivateData(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Call call(env, "rdma_cm private data", Domain::Errno);
  CmEp* ep = OpenEp(call, info[0]);
  if (ep == nullptr) return env.Undefined();
  return conn::CopyBytes(env, ep->state->private_data.data(), ep->state->private_data.size());
}

// Refuses anything but an incoming request not yet answered.
bool Unanswered(const Call& call, CmEpState& state) {
  if (!state.listener) return call.Invalid("the endpoint is not an incoming request (cmGetRequest): it connects instead"), false;
  if (state.phase != CmEpState::Phase::Ready) return call.Invalid("the request was already accepted or rejected"), false;
  return true;
}

Napi::Value CmAccept(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Call call(env, "rdma_accept", Domain::Errno);
  CmEp* ep = OpenEp(call, info[0]);
  std::vector<uint8_t> data;
  if (ep == nullptr || !ParsePrivateData(call, info[1], kAcceptLimit, &data) || !conn::IsCallback(call, info[2])) {
    return env.Undefined();
  }
  CmEpState& state = *ep->state;
  if (!Unanswered(call, state)) return env.Undefined();
  uint8_t responder, initiator;
  Depths(state, &responder, &initiator);
  // As many reads as the request asked for, the config asks and the device allows, each way.
  rdma_conn_param param =
      ConnParam(state.config, data, std::min(responder, state.initiator_depth), std::min(initiator, state.responder_resources));
  errno = 0;
  if (rdma_accept(state.id, &param) != 0) {
    int errnum = LastErrno(EINVAL);
    // The request was unanswered (checked above): the CM refuses it only when the client's REJ came.
    if (errnum != EINVAL) return call.Fail(errnum);
    state.phase = CmEpState::Phase::Rejected;
    return call.Fail(ECONNABORTED, kClientGone);
  }
  state.phase = CmEpState::Phase::Accepting;
  return StartSetup(call, state, info[2]);
}

Napi::Value CmReject(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Call call(env, "rdma_reject", Domain::Errno);
  CmEp* ep = OpenEp(call, info[0]);
  std::vector<uint8_t> data;
  if (ep == nullptr || !ParsePrivateData(call, info[1], kRejectLimit, &data) || !Unanswered(call, *ep->state)) {
    return env.Undefined();
  }
  errno = 0;
  if (rdma_reject(ep->state->id, data.empty() ? nullptr : data.data(), static_cast<uint8_t>(data.size())) != 0) {
    return call.Fail(LastErrno(EINVAL));
  }
  ep->state->phase = CmEpState::Phase::Rejected;
  return env.Undefined();
}

Napi::Value CmNextEvent(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Call call(env, "rdma_get_cm_event", Domain::Errno);
  CmEp* ep = OpenEp(call, info[0]);
  if (ep == nullptr || !conn::IsCallback(call, info[1])) return env.Undefined();
  CmEpState& state = *ep->state;
  if (!state.events.empty() && state.setup_id == 0) {
    // An event already taken from the channel: answered now (the channel may stay quiet).
    Waiter waiter;
    waiter.id = NextWaitId();
    waiter.callback = Napi::Persistent(info[1].As<Napi::Function>());
    std::string name = state.events.front();
    state.events.pop_front();
    Deliver(env, waiter, nullptr, Napi::String::New(env, name), false);
    return Napi::Number::New(env, waiter.id);
  }
  return conn::StartWait(call, state.event_poller, state.channel->fd, info[1]);
}

Napi::Value CmDisconnect(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Call call(env, "rdma_disconnect", Domain::Errno);
  CmEp* ep = OpenEp(call, info[0]);
  if (ep == nullptr) return env.Undefined();
  CmEpState& state = *ep->state;
  bool connected = state.phase == CmEpState::Phase::Established || state.phase == CmEpState::Phase::Connecting ||
                   state.phase == CmEpState::Phase::Accepting;
  if (!connected || state.disconnect_called) return env.Undefined();
  state.disconnect_called = true;
  errno = 0;
  // The queue pair goes to the error state: what is posted completes with IBV_WC_WR_FLUSH_ERR.
  if (rdma_disconnect(state.id) != 0) {
    int errnum = LastErrno(EINVAL);
    if (errnum != EINVAL) return call.Fail(errnum);  // EINVAL: the CM had already ended the connection
  }
  return env.Undefined();
}

Napi::Value CmEpDestroy(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Call call(env, "rdma_destroy_ep", Domain::Errno);
  CmEp* ep = OpenEp(call, info[0]);
  if (ep == nullptr) return env.Undefined();
  std::shared_ptr<CmEpState> state = ep->state;
  if (state->regions != 0) {
    return call.InUse(std::to_string(state->regions) + (state->regions == 1 ? " region" : " regions") +
                      " still registered on the endpoint: deregister them first");
  }
  int result = state->Destroy(env);
  if (result != 0) return call.Fail(result, "the endpoint is destroyed");
  return env.Undefined();
}

Napi::Value CmListenerDestroy(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Call call(env, "rdma_destroy_ep", Domain::Errno);
  CmListener* listener = Open<CmListener>(call, info[0]);
  if (listener == nullptr) return env.Undefined();
  std::shared_ptr<CmListenerState> state = listener->state;
  if (state->endpoints != 0) {
    return call.InUse(std::to_string(state->endpoints) + (state->endpoints == 1 ? " endpoint" : " endpoints") +
                      " it handed out still alive: destroy them first");
  }
  state->Destroy(env);
  return env.Undefined();
}

void SetAddress(Napi::Object out, const char* address_key, const char* port_key, const sockaddr* address) {
  Napi::Env env = out.Env();
  char text[INET6_ADDRSTRLEN] = "";
  uint16_t port = 0;
  if (address != nullptr && address->sa_family == AF_INET) {
    const auto* v4 = reinterpret_cast<const sockaddr_in*>(address);
    inet_ntop(AF_INET, &v4->sin_addr, text, sizeof text);
    port = ntohs(v4->sin_port);
  } else if (address != nullptr && address->sa_family == AF_INET6) {
    const auto* v6 = reinterpret_cast<const sockaddr_in6*>(address);
    inet_ntop(AF_INET6, &v6->sin6_addr, text, sizeof text);
    port = ntohs(v6->sin6_port);
  }
  out.Set(address_key, Napi::String::New(env, text));
  out.Set(port_key, Napi::Number::New(env, port));
}

Napi::Value CmEpInfo(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Call call(env, "rdma_cm endpoint", Domain::Errno);
  CmEp* ep = OpenEp(call, info[0]);
  if (ep == nullptr) return env.Undefined();
  CmEpState& state = *ep->state;
  Napi::Object result = Napi::Object::New(env);
  result.Set("qpNum", Napi::Number::New(env, state.has_qp ? state.id->qp->qp_num : 0));
  result.Set("maxInlineData", Napi::Number::New(env, state.config.max_inline_data));
  SetAddress(result, "localAddress", "localPort", rdma_get_local_addr(state.id));
  SetAddress(result, "remoteAddress", "remotePort", rdma_get_peer_addr(state.id));
  return result;
}

// Never throws: an Effect canceller calls it.
Napi::Value CmCancel(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Kind kind;
  if (!KindOf(info[0], &kind) || !info[1].IsNumber()) return Napi::Boolean::New(env, false);
  double id = info[1].As<Napi::Number>().DoubleValue();
  bool found = false;
  if (kind == Kind::CmEp) {
    CmEp* handle = Unwrapped<CmEp>(info[0]);
    if (handle != nullptr && handle->state) {
      CmEpState& state = *handle->state;
      if (state.setup_id == id) state.setup_id = 0;
      found = state.event_poller.Cancel(id) || state.completions.Cancel(id);
    }
  } else if (kind == Kind::CmListener) {
    CmListener* handle = Unwrapped<CmListener>(info[0]);
    found = handle != nullptr && handle->state && handle->state->requests.Cancel(id);
  }
  return Napi::Boolean::New(env, found);
}

}  // namespace

void RegisterCmEp(Napi::Env env, Napi::Object exports) {
  exports.Set("cmEpCreate", Napi::Function::New(env, CmEpCreate, "cmEpCreate"));
  exports.Set("cmConnect", Napi::Function::New(env, CmConnect, "cmConnect"));
  exports.Set("cmListen", Napi::Function::New(env, CmListen, "cmListen"));
  exports.Set("cmGetRequest", Napi::Function::New(env, CmGetRequest, "cmGetRequest"));
  exports.Set("cmPrivateData", Napi::Function::New(env, CmPrivateData, "cmPrivateData"));
  exports.Set("cmAccept", Napi::Function::New(env, CmAccept, "cmAccept"));
  exports.Set("cmReject", Napi::Function::New(env, CmReject, "cmReject"));
  exports.Set("cmNextEvent", Napi::Function::New(env, CmNextEvent, "cmNextEvent"));
  exports.Set("cmDisconnect", Napi::Function::New(env, CmDisconnect, "cmDisconnect"));
  exports.Set("cmEpDestroy", Napi::Function::New(env, CmEpDestroy, "cmEpDestroy"));
  exports.Set("cmListenerDestroy", Napi::Function::New(env, CmListenerDestroy, "cmListenerDestroy"));
  exports.Set("cmEpInfo", Napi::Function::New(env, CmEpInfo, "cmEpInfo"));
  exports.Set("cmCancel", Napi::Function::New(env, CmCancel, "cmCancel"));
  RegisterCmEpPost(env, exports);
}

}  // namespace rdma
