// Connections: endpoints (rpma_ep_*), connection requests (rpma_conn_req_*), connections
// (rpma_conn_*), work requests (rpma_write / read / flush / atomic_write / send / recv) and their
// completions. Every wait (an incoming request, a connection event, completions) watches a
// librpma file descriptor through a Poller and answers a JavaScript callback; the TypeScript
// driver turns each into an interruptible Effect.async whose canceller calls cancelWait.
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

#include "errors.h"
#include "handles.h"
#include "poll.h"

namespace rdma {

int ConnConfig::Make(rpma_conn_cfg** out) const {
  *out = nullptr;
  rpma_conn_cfg* cfg = nullptr;
  int code = rpma_conn_cfg_new(&cfg);
  if (code != 0) return code;
  if ((code = rpma_conn_cfg_set_timeout(cfg, timeout_ms)) != 0 || (code = rpma_conn_cfg_set_sq_size(cfg, sq_size)) != 0 ||
      (code = rpma_conn_cfg_set_rq_size(cfg, rq_size)) != 0 || (code = rpma_conn_cfg_set_cq_size(cfg, cq_size)) != 0 ||
      (code = rpma_conn_cfg_set_rcq_size(cfg, 0)) != 0 || (code = rpma_conn_cfg_set_compl_channel(cfg, false)) != 0) {
    rpma_conn_cfg_delete(&cfg);
    return code;
  }
  *out = cfg;
  return 0;
}

namespace {

constexpr double kMaxSafe = 9007199254740991.0;  // 2^53 - 1
constexpr double kMaxLength = 4294967295.0;      // librpma posts lengths as uint32_t

std::string NumberText(double value) {
  char text[64];
  std::snprintf(text, sizeof text, "%.17g", value);
  return text;
}

Napi::Value RpmaErrorValue(Napi::Env env, int code, const char* operation, const std::string& detail) {
  return MakeError(env, Domain::Rpma, code, operation, detail).Value();
}

// A JavaScript number that is an integer in [0, max], or a refusal through `call`.
bool Integer(const Call& call, Napi::Value value, const char* what, double max, double* out) {
  if (!value.IsNumber()) return call.Invalid(std::string(what) + " must be a number"), false;
  double number = value.As<Napi::Number>().DoubleValue();
  if (!(number >= 0 && number <= max && number == std::floor(number))) {
    return call.Invalid(std::string(what) + " " + NumberText(number) + " is not an integer from 0 to " + NumberText(max)),
           false;
  }
  *out = number;
  return true;
}

// core's ConnConfig: { timeoutMs, sqSize, rqSize, cqSize, directWriteToPmem }.
bool ParseConfig(const Call& call, Napi::Value value, ConnConfig* out) {
  if (!value.IsObject()) return call.Invalid("cfg must be an object"), false;
  Napi::Object object = value.As<Napi::Object>();
  // Every field read before any is checked; a throwing getter or Proxy trap fails the call.
  Napi::Value fields[5];
  const char* const names[5] = {"timeoutMs", "sqSize", "rqSize", "cqSize", "directWriteToPmem"};
  for (int i = 0; i < 5; i++) {
    fields[i] = object.Get(names[i]);
    if (call.Env().IsExceptionPending()) return call.Invalid(std::string("reading cfg.") + names[i] + " threw"), false;
  }
  double timeout, sq, rq, cq;
  if (!Integer(call, fields[0], "timeoutMs", INT_MAX, &timeout) ||
      !Integer(call, fields[1], "sqSize", UINT32_MAX, &sq) || !Integer(call, fields[2], "rqSize", UINT32_MAX, &rq) ||
      !Integer(call, fields[3], "cqSize", UINT32_MAX, &cq)) {
    return false;
  }
  Napi::Value direct = fields[4];
  if (!direct.IsBoolean() && !direct.IsUndefined()) return call.Invalid("directWriteToPmem must be a boolean"), false;
  out->timeout_ms = static_cast<int>(timeout);
  out->sq_size = static_cast<uint32_t>(sq);
  out->rq_size = static_cast<uint32_t>(rq);
  out->cq_size = static_cast<uint32_t>(cq);
  out->direct_write_to_pmem = direct.IsBoolean() && direct.As<Napi::Boolean>().Value();
  return true;
}

Napi::Uint8Array CopyBytes(Napi::Env env, const void* data, std::size_t size) {
  Napi::Uint8Array bytes = Napi::Uint8Array::New(env, size);
  if (size != 0 && data != nullptr) std::memcpy(bytes.Data(), data, size);
  return bytes;
}

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

// A read on a non-blocking descriptor found nothing: librpma reports it as a provider error.
bool NothingYet(int code, int errnum) {
  return code == RPMA_E_NO_EVENT || (code == RPMA_E_PROVIDER && (errnum == EAGAIN || errnum == EWOULDBLOCK));
}

// Fails every waiter of `poller`, with the descriptor's libuv error.
void FailAll(Napi::Env env, Poller& poller, const char* operation, int status) {
  std::deque<Waiter> waiters;
  waiters.swap(poller.waiters);
  poller.Pause();
  for (Waiter& waiter : waiters) {
    Deliver(env, waiter, RpmaErrorValue(env, RPMA_E_PROVIDER, operation, std::string("uv_poll: ") + uv_strerror(status)),
            nullptr, true);
  }
}

Napi::Object NewConnReq(Napi::Env env, rpma_conn_req* req, const std::shared_ptr<PeerState>& peer,
                        const std::shared_ptr<EndpointState>& endpoint, const ConnConfig& config) {
  ConnReq* handle;
  Napi::Object object = ConnReq::New(env, &handle);
  if (handle == nullptr) {
    rpma_conn_req_delete(&req);  // nobody can answer it: rejected
    return object;
  }
  auto state = std::make_shared<ConnReqState>();
  state->req = req;
  state->peer = peer;
  state->endpoint = endpoint;
  state->config = config;
  peer->users++;
  if (endpoint) endpoint->unanswered.insert(state.get());
  handle->state = std::move(state);
  Count(Kind::ConnReq, +1);
  return object;
}

}  // namespace

// ---- endpoints ----

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
      Deliver(env, waiter, RpmaErrorValue(env, code, "rpma_ep_next_conn_req", log), nullptr, true);
      continue;
    }
    ConnConfig config;
    config.direct_write_to_pmem = waiter.direct_write_to_pmem;
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

// ---- connection requests ----

int ConnReqState::Delete() {
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
  // The shared states stay: an endpoint outlives its requests' wrappers, harmlessly.
}

// ---- connections ----

ConnState::ConnState()
    : events([this](Napi::Env env, int status) { OnEvent(env, status); }),
      completions([this](Napi::Env env, int status) { OnCompletion(env, status); }) {}

ConnState::~ConnState() { Delete(); }

int ConnState::Delete() {
  // Out of epoll before librpma closes the descriptors.
  events.Close();
  completions.Close();
  if (conn == nullptr) return 0;
  int code = rpma_conn_delete(&conn);  // frees it even when it fails
  conn = nullptr;
  cq = nullptr;
  Count(Kind::Conn, -1);
  if (peer) peer->users--;
  // The queue pair is gone: the device no longer touches the regions of requests in flight.
  for (auto& entry : posted) {
    if (entry.second.region) entry.second.region->in_flight--;
  }
  posted.clear();
  return code;
}

int ConnState::Drain(Napi::Env env, Napi::Array out, uint32_t* count) {
  constexpr int kBatch = 32;
  ibv_wc wc[kBatch];
  for (;;) {
    int got = 0;
    int code = rpma_cq_get_wc(cq, kBatch, wc, &got);
    if (code == RPMA_E_NO_COMPLETION) return 0;
    if (code != 0) return code;
    for (int i = 0; i < got; i++) {
      auto found = posted.find(wc[i].wr_id);
      if (found == posted.end()) continue;  // not a request of ours
      Posted request = std::move(found->second);
      posted.erase(found);
      if (request.region) request.region->in_flight--;
      Napi::Object completion = Napi::Object::New(env);
      completion.Set("id", Napi::Number::New(env, request.id));
      completion.Set("status", Napi::Number::New(env, static_cast<double>(wc[i].status)));
      // byte_len (like opcode) means something only for a successful receive.
      double length = request.recv && wc[i].status == IBV_WC_SUCCESS ? static_cast<double>(wc[i].byte_len) : 0;
      completion.Set("byteLength", Napi::Number::New(env, length));
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

void ConnState::OnCompletion(Napi::Env env, int status) {
  std::shared_ptr<ConnState> keep = shared_from_this();
  if (status < 0) return FailAll(env, completions, "rpma_cq_wait", status);
  while (conn != nullptr && !completions.waiters.empty()) {
    int fd = -1;
    if (rpma_cq_get_fd(cq, &fd) != 0 || !Readable(fd)) break;
    // Takes the channel's event, acknowledges it and re-arms the queue; only then drain, so that a
    // completion arriving after the drain raises a new event.
    ClearLog();
    int code = rpma_cq_wait(cq);
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
}

namespace {

// Adds a waiter for `callback` to `poller` and starts watching `fd`; returns its id, or throws.
Napi::Value StartWait(const Call& call, Poller& poller, int fd, Napi::Value callback, rpma_conn_cfg* cfg,
                      bool direct_write_to_pmem) {
  Waiter waiter;
  waiter.id = NextWaitId();
  waiter.cfg = cfg;
  waiter.direct_write_to_pmem = direct_write_to_pmem;
  waiter.callback = Napi::Persistent(callback.As<Napi::Function>());
  double id = waiter.id;
  poller.waiters.push_back(std::move(waiter));
  int errnum = poller.Watch(call.Env(), fd);
  if (errnum != 0) {
    poller.Cancel(id);
    return call.Fail(RPMA_E_PROVIDER, std::string("cannot watch the file descriptor: ") + std::strerror(errnum));
  }
  return Napi::Number::New(call.Env(), id);
}

bool IsCallback(const Call& call, Napi::Value value) {
  if (value.IsFunction()) return true;
  call.Invalid("callback must be a function");
  return false;
}

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
  return StartWait(call, handle->state->requests, fd, info[2], cfg, config.direct_write_to_pmem);
}

// rpma_conn_req_new resolves the address and the route: up to the timeout, off the event loop.
class ConnReqNewWorker : public Napi::AsyncWorker {
 public:
  ConnReqNewWorker(Napi::Env env, std::shared_ptr<PeerState> peer, std::string address, std::string service,
                   const ConnConfig& config, rpma_conn_cfg* cfg)
      : Napi::AsyncWorker(env, "rpma_conn_req_new"),
        deferred_(env),
        peer_(std::move(peer)),
        address_(std::move(address)),
        service_(std::move(service)),
        config_(config),
        cfg_(cfg) {
    peer_->users++;  // the worker thread uses the peer
  }

  ~ConnReqNewWorker() override {
    if (req_ != nullptr) rpma_conn_req_delete(&req_);
    if (cfg_ != nullptr) rpma_conn_cfg_delete(&cfg_);
    peer_->users--;
  }

  Napi::Value Promise() const { return deferred_.Promise(); }

  void Execute() override {
    ClearLog();
    code_ = rpma_conn_req_new(peer_->peer, address_.c_str(), service_.c_str(), cfg_, &req_);
    log_ = TakeLog();
  }

  void OnOK() override {
    Napi::Env env = Env();
    if (!CanRunJs(env)) return;  // the destructor deletes the request
    if (code_ != 0) {
      // librpma's log names the verb that failed (rdma_resolve_addr, ibv_create_cq, ...): say "no
      // device reaches it" only when address or route resolution is what failed.
      bool route = log_.empty() || log_.find("rdma_resolve") != std::string::npos ||
                   log_.find("rdma_getaddrinfo") != std::string::npos;
      std::string detail =
          code_ != RPMA_E_PROVIDER ? std::string()
          : route ? "cannot resolve an RDMA route to " + address_ + ":" + service_ + " (no RDMA device reaches it)"
                  : "setting up the connection to " + address_ + ":" + service_ + " failed (see librpma's reason)";
      if (code_ == RPMA_E_PROVIDER && config_.timeout_ms == 0) detail = Join(detail, "the timeout is 0 ms");
      deferred_.Reject(RpmaErrorValue(env, code_, "rpma_conn_req_new", Join(detail, log_)));
      return;
    }
    rpma_conn_req* req = req_;
    req_ = nullptr;
    Napi::Object object = NewConnReq(env, req, peer_, nullptr, config_);
    if (object.IsEmpty()) {
      if (env.IsExceptionPending()) env.GetAndClearPendingException();
      if (CanRunJs(env)) deferred_.Reject(RpmaErrorValue(env, RPMA_E_NOMEM, "rpma_conn_req_new", "cannot make a handle"));
      return;
    }
    deferred_.Resolve(object);
  }

 private:
  Settler deferred_;
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
  auto* worker = new ConnReqNewWorker(env, peer->state, info[1].As<Napi::String>().Utf8Value(),
                                      std::to_string(static_cast<int>(port)), config, cfg);
  Napi::Value promise = worker->Promise();
  if (promise.IsEmpty()) {
    delete worker;  // JavaScript cannot run: nobody would hear the answer
    return promise;
  }
  worker->Queue();  // deletes itself when done
  return promise;
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
    // rdma_cm's limits in the TCP port space: 56 bytes with a connection request, 196 with an
    // accept. Refused here, before librpma consumes the request, so that the caller can still
    // reject it (rpma_conn_req_delete) and the client hears REJECTED at once instead of waiting
    // out its timeout on a request the device refused.
    std::size_t limit = handle->state->endpoint ? 196 : 56;
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
  if (code != 0) return call.Fail(code, log);

  Conn* wrapper;
  Napi::Object object = Conn::New(env, &wrapper);
  if (wrapper == nullptr) {
    rpma_conn_delete(&conn);
    return call.Fail(RPMA_E_NOMEM, "cannot make a handle for the connection; it is deleted");
  }
  auto state = std::make_shared<ConnState>();
  state->conn = conn;
  state->peer = req->peer;
  state->peer->users++;
  Count(Kind::Conn, +1);
  wrapper->state = state;
  code = rpma_conn_get_cq(conn, &state->cq);
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

const char* OperationOf(const std::string& op) {
  if (op == "write") return "rpma_write";
  if (op == "read") return "rpma_read";
  if (op == "flush") return "rpma_flush";
  if (op == "atomicWrite") return "rpma_atomic_write";
  if (op == "send") return "rpma_send";
  if (op == "recv") return "rpma_recv";
  return nullptr;
}

// The work request's fields, read once and before any handle is opened: a getter or a Proxy trap
// runs JavaScript, which could otherwise close a handle between its check and its use.
struct RequestFields {
  Napi::Value id, dst, src, dst_offset, src_offset, offset, length, type, value;
};

bool ReadField(const Call& call, Napi::Object object, const char* key, Napi::Value* out) {
  *out = object.Get(key);
  if (!call.Env().IsExceptionPending()) return true;
  call.Invalid(std::string("reading the work request's ") + key + " threw");
  return false;
}

Napi::Value Post(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  std::string op;
  Napi::Value op_value;
  if (info[1].IsObject()) {
    op_value = info[1].As<Napi::Object>().Get("op");
    if (!env.IsExceptionPending() && op_value.IsString()) op = op_value.As<Napi::String>().Utf8Value();
  }
  const char* operation = OperationOf(op);
  Call call(env, operation != nullptr ? operation : "rpma_write", Domain::Rpma);
  if (env.IsExceptionPending()) return call.Invalid("reading the work request's op threw");
  if (!info[1].IsObject()) return call.Invalid("the work request must be an object");
  if (operation == nullptr) return call.Invalid("unknown work request \"" + op + "\"");
  Napi::Object request = info[1].As<Napi::Object>();
  RequestFields f;
  if (!ReadField(call, request, "id", &f.id) || !ReadField(call, request, "dst", &f.dst) ||
      !ReadField(call, request, "src", &f.src) || !ReadField(call, request, "dstOffset", &f.dst_offset) ||
      !ReadField(call, request, "srcOffset", &f.src_offset) || !ReadField(call, request, "offset", &f.offset) ||
      !ReadField(call, request, "length", &f.length) || !ReadField(call, request, "type", &f.type) ||
      !ReadField(call, request, "value", &f.value)) {
    return env.Undefined();
  }
  Conn* handle = Open<Conn>(call, info[0]);
  if (handle == nullptr) return env.Undefined();
  if (!f.id.IsNumber()) return call.Invalid("id must be a number");

  ConnState& conn = *handle->state;
  uint64_t token = conn.next_token++;
  const void* context = reinterpret_cast<const void*>(static_cast<uintptr_t>(token));
  constexpr int flags = RPMA_F_COMPLETION_ALWAYS;
  Posted posted;
  posted.id = f.id.As<Napi::Number>().DoubleValue();
  double dst_offset = 0, src_offset = 0, length = 0;
  int code = 0;
  ClearLog();
  if (op == "write" || op == "read") {
    bool write = op == "write";
    MrRemote* remote = Open<MrRemote>(call, write ? f.dst : f.src);
    if (remote == nullptr) return env.Undefined();
    MrLocal* local = Open<MrLocal>(call, write ? f.src : f.dst);
    if (local == nullptr || !Integer(call, f.dst_offset, "dst_offset", kMaxSafe, &dst_offset) ||
        !Integer(call, f.src_offset, "src_offset", kMaxSafe, &src_offset) ||
        !Integer(call, f.length, "len", kMaxLength, &length)) {
      return env.Undefined();
    }
    code = write ? rpma_write(conn.conn, remote->mr, static_cast<size_t>(dst_offset), local->state->mr,
                              static_cast<size_t>(src_offset), static_cast<size_t>(length), flags, context)
                 : rpma_read(conn.conn, local->state->mr, static_cast<size_t>(dst_offset), remote->mr,
                             static_cast<size_t>(src_offset), static_cast<size_t>(length), flags, context);
    posted.region = local->state;
  } else if (op == "flush") {
    MrRemote* remote = Open<MrRemote>(call, f.dst);
    if (remote == nullptr || !Integer(call, f.dst_offset, "dst_offset", kMaxSafe, &dst_offset) ||
        !Integer(call, f.length, "len", kMaxLength, &length)) {
      return env.Undefined();
    }
    std::string kind = f.type.IsString() ? f.type.As<Napi::String>().Utf8Value() : "";
    if (kind != "visibility" && kind != "persistent") return call.Invalid("unknown flush type");
    code = rpma_flush(conn.conn, remote->mr, static_cast<size_t>(dst_offset), static_cast<size_t>(length),
                      kind == "persistent" ? RPMA_FLUSH_TYPE_PERSISTENT : RPMA_FLUSH_TYPE_VISIBILITY, flags, context);
  } else if (op == "atomicWrite") {
    MrRemote* remote = Open<MrRemote>(call, f.dst);
    if (remote == nullptr || !Integer(call, f.dst_offset, "dst_offset", kMaxSafe, &dst_offset)) {
      return env.Undefined();
    }
    Napi::Value value = f.value;
    if (!value.IsTypedArray() || value.As<Napi::TypedArray>().TypedArrayType() != napi_uint8_array ||
        value.As<Napi::Uint8Array>().ByteLength() != 8) {
      return call.Invalid("src must be a Uint8Array of 8 bytes");
    }
    // Posted inline: librpma copies the 8 bytes into the request.
    char bytes[8];
    std::memcpy(bytes, value.As<Napi::Uint8Array>().Data(), sizeof bytes);
    code = rpma_atomic_write(conn.conn, remote->mr, static_cast<size_t>(dst_offset), bytes, flags, context);
  } else {
    bool send = op == "send";
    MrLocal* local = Open<MrLocal>(call, send ? f.src : f.dst);
    if (local == nullptr || !Integer(call, f.offset, "offset", kMaxSafe, &src_offset) ||
        !Integer(call, f.length, "len", kMaxLength, &length)) {
      return env.Undefined();
    }
    code = send ? rpma_send(conn.conn, local->state->mr, static_cast<size_t>(src_offset), static_cast<size_t>(length),
                            flags, context)
                : rpma_recv(conn.conn, local->state->mr, static_cast<size_t>(src_offset), static_cast<size_t>(length),
                            context);
    posted.region = local->state;
    posted.recv = !send;
  }
  std::string log = TakeLog();
  if (code != 0) return call.Fail(code, log);
  // The region stays registered (its dereg refused) until this request's completion is returned.
  if (posted.region) posted.region->in_flight++;
  conn.posted.emplace(token, std::move(posted));
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
  int fd = -1;
  int code = rpma_cq_get_fd(handle->state->cq, &fd);
  if (code != 0) return call.Fail(code, "rpma_cq_get_fd");
  return StartWait(call, handle->state->completions, fd, info[1], nullptr, false);
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
  exports.Set("epListen", Napi::Function::New(env, EpListen, "epListen"));
  exports.Set("epShutdown", Napi::Function::New(env, EpShutdown, "epShutdown"));
  exports.Set("epNextConnReq", Napi::Function::New(env, EpNextConnReq, "epNextConnReq"));
  exports.Set("connReqNew", Napi::Function::New(env, ConnReqNew, "connReqNew"));
  exports.Set("connReqPrivateData", Napi::Function::New(env, ConnReqPrivateData, "connReqPrivateData"));
  exports.Set("connReqConnect", Napi::Function::New(env, ConnReqConnect, "connReqConnect"));
  exports.Set("connReqDelete", Napi::Function::New(env, ConnReqDelete, "connReqDelete"));
  exports.Set("connNextEvent", Napi::Function::New(env, ConnNextEvent, "connNextEvent"));
  exports.Set("connPrivateData", Napi::Function::New(env, ConnPrivateData, "connPrivateData"));
  exports.Set("connDisconnect", Napi::Function::New(env, ConnDisconnect, "connDisconnect"));
  exports.Set("connDelete", Napi::Function::New(env, ConnDelete, "connDelete"));
  exports.Set("post", Napi::Function::New(env, Post, "post"));
  exports.Set("connPollCompletions", Napi::Function::New(env, ConnPollCompletions, "connPollCompletions"));
  exports.Set("connWaitCompletions", Napi::Function::New(env, ConnWaitCompletions, "connWaitCompletions"));
  exports.Set("cancelWait", Napi::Function::New(env, CancelWait, "cancelWait"));
}

}  // namespace rdma
