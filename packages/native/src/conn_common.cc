// Helpers shared by the connection files; see conn_common.h.
#include <infiniband/verbs.h>
#include <librpma.h>
#include <napi.h>

#include <algorithm>
#include <cctype>
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
namespace conn {

std::string NumberText(double value) {
  char text[64];
  std::snprintf(text, sizeof text, "%.17g", value);
  return text;
}

Napi::Value RpmaErrorValue(Napi::Env env, int code, const char* operation, const std::string& detail) {
  return MakeError(env, Domain::Rpma, code, operation, detail).Value();
}

bool Integer(const Call& call, Napi::Value value, const char* what, double max, double* out) {
  if (!value.IsNumber()) return call.Invalid(std::string(what) + " must be a number"), false;
  return Integer(call, value.As<Napi::Number>().DoubleValue(), what, max, out);
}

bool Integer(const Call& call, double number, const char* what, double max, double* out) {
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
  Napi::Value fields[8];
  const char* const names[8] = {"timeoutMs",         "sqSize", "rqSize", "cqSize", "directWriteToPmem",
                                "srq",               "rcqSize", "sharedCompletionChannel"};
  for (int i = 0; i < 8; i++) {
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
  double rcq = 0;
  if (!fields[6].IsUndefined() && !Integer(call, fields[6], "rcqSize", UINT32_MAX, &rcq)) return false;
  if (!fields[7].IsBoolean() && !fields[7].IsUndefined()) {
    return call.Invalid("sharedCompletionChannel must be a boolean"), false;
  }
  out->rcq_size = static_cast<uint32_t>(rcq);
  out->shared_channel = fields[7].IsBoolean() && fields[7].As<Napi::Boolean>().Value();
  if (!fields[5].IsUndefined() && !fields[5].IsNull()) {
    Srq* srq = Open<Srq>(call, fields[5]);
    if (srq == nullptr) return false;
    out->srq = srq->state;
  }
  out->timeout_ms = static_cast<int>(timeout);
  out->sq_size = static_cast<uint32_t>(sq);
  out->rq_size = static_cast<uint32_t>(rq);
  out->cq_size = static_cast<uint32_t>(cq);
  out->direct_write_to_pmem = direct.IsBoolean() && direct.As<Napi::Boolean>().Value();
  return true;
}

namespace {

// The first verb (ibv_* or rdma_*) librpma's log names, e.g. "rdma_create_qp_ex"; "" if none.
std::string FailedVerb(const std::string& log) {
  std::size_t best = std::string::npos;
  for (const char* prefix : {"ibv_", "rdma_"}) best = std::min(best, log.find(prefix));
  if (best == std::string::npos) return {};
  std::size_t end = best;
  while (end < log.size() && (std::isalnum(static_cast<unsigned char>(log[end])) || log[end] == '_')) end++;
  return log.substr(best, end - best);
}

}  // namespace

std::string SetupFailure(const std::string& log, const ConnConfig& config, ibv_context* context,
                         const std::string& target) {
  std::string verb = FailedVerb(log);
  ibv_device_attr device{};
  bool limits = context != nullptr && ibv_query_device(context, &device) == 0;
  std::string devinfo = " (`ibv_devinfo -v` shows the device's limits)";
  if (verb == "ibv_create_cq") {
    std::string what = "ibv_create_cq failed for a completion queue of " + std::to_string(config.cq_size) + " entries";
    if (limits && config.cq_size > static_cast<uint32_t>(device.max_cqe)) {
      return what + ": this device's max_cqe is " + std::to_string(device.max_cqe) +
             "; make completionQueueSize (cqSize) at most that" + devinfo;
    }
    return what + devinfo;
  }
  if (verb.rfind("rdma_create_qp", 0) == 0 || verb == "ibv_create_qp") {
    std::string what = verb + " failed for a queue pair of " + std::to_string(config.sq_size) + " send and " +
                       std::to_string(config.rq_size) + " receive requests";
    uint32_t largest = std::max(config.sq_size, config.rq_size);
    if (limits && largest > static_cast<uint32_t>(device.max_qp_wr)) {
      return what + ": this device's max_qp_wr is " + std::to_string(device.max_qp_wr) +
             "; make sendQueueSize (sqSize) and receiveQueueSize (rqSize) at most that" + devinfo;
    }
    return what + devinfo;
  }
  bool route = verb.empty() || verb.rfind("rdma_resolve", 0) == 0 || verb == "rdma_getaddrinfo";
  if (route && config.timeout_ms == 0) {
    std::string what = verb.empty() ? std::string("resolving the route") : verb;
    return what + " failed with a timeout of 0 ms: give timeoutMs above 0";
  }
  if (route) {
    return "cannot resolve an RDMA route to " + target +
           " (no RDMA device reaches it): check that an RDMA device is up on that network (`ibv_devinfo`, `rdma link`, "
           "or effect-rdma-doctor --address <a local address>)";
  }
  return "setting up the connection to " + target + " failed at " + verb + " (librpma's reason follows)";
}

Napi::Uint8Array CopyBytes(Napi::Env env, const void* data, std::size_t size) {
  Napi::Uint8Array bytes = Napi::Uint8Array::New(env, size);
  if (size != 0 && data != nullptr) std::memcpy(bytes.Data(), data, size);
  return bytes;
}

bool NothingYet(int code, int errnum) {
  return code == RPMA_E_NO_EVENT || (code == RPMA_E_PROVIDER && (errnum == EAGAIN || errnum == EWOULDBLOCK));
}

// Fails every waiter of `poller`, with the descriptor's libuv error.
void FailAll(Napi::Env env, Poller& poller, const char* operation, int status, Domain domain) {
  std::deque<Waiter> waiters;
  waiters.swap(poller.waiters);
  poller.Pause();
  int code = domain == Domain::Rpma ? RPMA_E_PROVIDER : EIO;
  for (Waiter& waiter : waiters) {
    Deliver(env, waiter, MakeError(env, domain, code, operation, std::string("uv_poll: ") + uv_strerror(status)).Value(),
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
  if (config.srq) config.srq->users++;
  handle->state = std::move(state);
  Count(Kind::ConnReq, +1);
  return object;
}

Napi::Value StartWait(const Call& call, Poller& poller, int fd, Napi::Value callback, rpma_conn_cfg* cfg,
                      bool direct_write_to_pmem, std::shared_ptr<void> srq) {
  Waiter waiter;
  waiter.srq = std::move(srq);
  waiter.id = NextWaitId();
  waiter.cfg = cfg;
  waiter.direct_write_to_pmem = direct_write_to_pmem;
  waiter.callback = Napi::Persistent(callback.As<Napi::Function>());
  double id = waiter.id;
  poller.waiters.push_back(std::move(waiter));
  int errnum = poller.Watch(call.Env(), fd);
  if (errnum != 0) {
    poller.Cancel(id);
    return call.Fail(call.GetDomain() == Domain::Rpma ? RPMA_E_PROVIDER : errnum,
                     std::string("cannot watch the file descriptor: ") + std::strerror(errnum));
  }
  return Napi::Number::New(call.Env(), id);
}

bool CompletionRowsOf(napi_env env, napi_value value, uint32_t fields, double** data, uint32_t* capacity) {
  // One call reads the array's kind, length and bytes (it refuses anything but a typed array).
  napi_typedarray_type type = napi_uint8_array;
  std::size_t length = 0;
  void* bytes = nullptr;
  if (napi_get_typedarray_info(env, value, &type, &length, &bytes, nullptr, nullptr) != napi_ok ||
      type != napi_float64_array) {
    return false;
  }
  *capacity = static_cast<uint32_t>(std::min<std::size_t>(length / fields, UINT32_MAX));
  *data = static_cast<double*>(bytes);
  return *capacity != 0 && bytes != nullptr;
}

bool CompletionRows(const Call& call, Napi::Value value, uint32_t fields, double** data, uint32_t* capacity) {
  if (CompletionRowsOf(call.Env(), value, fields, data, capacity)) return true;
  call.Invalid("the completions' array must be a Float64Array that holds at least one completion (" +
               std::to_string(fields) + " numbers)");
  return false;
}

bool IsCallback(const Call& call, Napi::Value value) {
  if (value.IsFunction()) return true;
  call.Invalid("callback must be a function");
  return false;
}

}  // namespace conn
}  // namespace rdma
