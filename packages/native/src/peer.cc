// rpma_utils_get_ibv_context, rpma_peer_new, rpma_peer_delete; and, for the doctor, the devices
// as libibverbs sees them.
#include <endian.h>
#include <infiniband/verbs.h>
#include <librpma.h>
#include <napi.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>

#include "async_work.h"
#include "errors.h"
#include "handles.h"

namespace rdma {

PeerState::~PeerState() {
  // GC backstop. Regions hold this state, so by now none is left.
  if (peer == nullptr) return;
  rpma_peer_delete(&peer);
  Count(Kind::Peer, -1);
}

namespace {

// Address resolution can take seconds: off the event loop, answered through a Promise.
class GetIbvContextJob {
 public:
  GetIbvContextJob(std::string address, rpma_util_ibv_context_type type, std::string kind)
      : address_(std::move(address)), kind_(std::move(kind)), type_(type) {}

  void Run() {
    ClearLog();
    code_ = rpma_utils_get_ibv_context(address_.c_str(), type_, &context_);
    log_ = TakeLog();
  }

  Outcome Settle(Napi::Env env) {
    // rdma_cm binds a loopback address without a device: librpma then "succeeds" with a NULL
    // context. No device answers there, which is what RPMA_E_PROVIDER says everywhere else.
    if (code_ == 0 && context_ == nullptr) code_ = RPMA_E_PROVIDER;
    if (code_ != 0) {
      std::string detail = code_ == RPMA_E_PROVIDER
                               ? "no RDMA device answers at " + kind_ + " address " + address_ +
                                     " (is an RDMA device, e.g. Soft-RoCE via `rdma link add`, bound to it?)"
                               : std::string();
      return Outcome::Reject(
          MakeError(env, Domain::Rpma, code_, "rpma_utils_get_ibv_context", Join(detail, log_)).Value());
    }
    IbvContext* handle;
    Napi::Object object = IbvContext::New(env, &handle);
    // The context belongs to librdmacm's device list: nothing to release.
    if (handle == nullptr) return Outcome::Unmade("cannot make a handle for the device context");
    handle->context = context_;
    return Outcome::Resolve(object);
  }

 private:
  std::string address_;
  std::string kind_;
  rpma_util_ibv_context_type type_;
  ibv_context* context_ = nullptr;
  int code_ = 0;
  std::string log_;
};

Napi::Value GetIbvContext(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Call call(env, "rpma_utils_get_ibv_context", Domain::Rpma);
  // Argument errors reject too, so that callers see one shape: a Promise.
  auto reject = [&](const std::string& detail) {
    if (!CanRunJs(env)) return Napi::Value();
    return Rejected(env, MakeError(env, Domain::Rpma, RPMA_E_INVAL, call.Operation(), detail).Value());
  };
  if (!info[0].IsString()) return reject(info[0].IsNull() || info[0].IsUndefined() ? "addr is NULL" : "addr must be a string");
  std::string kind = info[1].IsString() ? info[1].As<Napi::String>().Utf8Value() : "";
  if (kind != "local" && kind != "remote") return reject("type must be \"local\" or \"remote\"");
  return QueueWork<GetIbvContextJob>(env, "rpma_utils_get_ibv_context", info[0].As<Napi::String>().Utf8Value(),
                                     kind == "local" ? RPMA_UTIL_IBV_CONTEXT_LOCAL : RPMA_UTIL_IBV_CONTEXT_REMOTE, kind);
}

Napi::Value PeerNew(const Napi::CallbackInfo& info) {
  Call call(info.Env(), "rpma_peer_new", Domain::Rpma);
  IbvContext* context = Open<IbvContext>(call, info[0]);
  if (context == nullptr) return info.Env().Undefined();
  ClearLog();
  rpma_peer* peer = nullptr;
  int code = rpma_peer_new(context->context, &peer);
  std::string log = TakeLog();
  if (code != 0) return call.Fail(code, log);
  Peer* handle;
  Napi::Object object = Peer::New(info.Env(), &handle);
  if (handle == nullptr) {
    rpma_peer_delete(&peer);
    return call.Fail(RPMA_E_NOMEM, "cannot make a handle for the peer; it is deleted");
  }
  handle->state = std::make_shared<PeerState>();
  handle->state->peer = peer;
  handle->state->context = context->context;
  Count(Kind::Peer, +1);
  return object;
}

Napi::Value PeerDelete(const Napi::CallbackInfo& info) {
  Call call(info.Env(), "rpma_peer_delete", Domain::Rpma);
  Peer* handle = Open<Peer>(call, info[0]);
  if (handle == nullptr) return info.Env().Undefined();
  PeerState& state = *handle->state;
  // librpma would free the peer under its regions' feet; refuse and leave the peer usable.
  if (state.regions != 0) {
    return call.InUse(std::to_string(state.regions) + (state.regions == 1 ? " region" : " regions") +
                        " still registered: deregister them first");
  }
  if (state.users != 0) {
    return call.InUse(std::to_string(state.users) +
                        (state.users == 1 ? " endpoint, connection request or connection still uses it"
                                          : " endpoints, connection requests or connections still use it") +
                        ": shut down or delete them first");
  }
  ClearLog();
  // Sets state.peer to NULL even when it fails (librpma frees it): never retried.
  int code = rpma_peer_delete(&state.peer);
  std::string log = TakeLog();
  state.peer = nullptr;
  Count(Kind::Peer, -1);
  if (code != 0) return call.Fail(code, log);
  return info.Env().Undefined();
}

// ---------------------------------------------------------------------------------------------
// The doctor (bin/doctor.ts): read-only queries of libibverbs. They open nothing that outlives
// the call and take no part in the driver.

// "0002:c9ff:fe12:3456", as ibv_devinfo prints a node GUID.
std::string FormatGuid(__be64 guid) {
  uint64_t value = be64toh(guid);
  char text[20];
  std::snprintf(text, sizeof text, "%04x:%04x:%04x:%04x", static_cast<unsigned>((value >> 48) & 0xffff),
                static_cast<unsigned>((value >> 32) & 0xffff), static_cast<unsigned>((value >> 16) & 0xffff),
                static_cast<unsigned>(value & 0xffff));
  return text;
}

int MtuBytes(ibv_mtu mtu) {
  switch (mtu) {
    case IBV_MTU_256: return 256;
    case IBV_MTU_512: return 512;
    case IBV_MTU_1024: return 1024;
    case IBV_MTU_2048: return 2048;
    case IBV_MTU_4096: return 4096;
  }
  return 0;
}

// As ibv_devinfo prints them (ibv_port_state_str gives lower-case prose instead).
const char* PortStateName(ibv_port_state state) {
  switch (state) {
    case IBV_PORT_NOP: return "PORT_NOP";
    case IBV_PORT_DOWN: return "PORT_DOWN";
    case IBV_PORT_INIT: return "PORT_INIT";
    case IBV_PORT_ARMED: return "PORT_ARMED";
    case IBV_PORT_ACTIVE: return "PORT_ACTIVE";
    case IBV_PORT_ACTIVE_DEFER: return "PORT_ACTIVE_DEFER";
  }
  return "PORT_UNKNOWN";
}

const char* LinkLayerName(uint8_t layer) {
  switch (layer) {
    case IBV_LINK_LAYER_INFINIBAND: return "InfiniBand";
    case IBV_LINK_LAYER_ETHERNET: return "Ethernet";
    default: return "unspecified";
  }
}

// [{ name, nodeGuid, nodeType, ports: [{ port, state, activeMtu, linkLayer }], error? }]: every
// device ibv_get_device_list returns, each opened just long enough to query its ports. A device
// that cannot be opened or queried is listed with `error`; only a failing list throws (errno).
Napi::Value IbvDevices(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Call call(env, "ibv_get_device_list", Domain::Errno);
  int count = 0;
  errno = 0;
  ibv_device** list = ibv_get_device_list(&count);
  if (list == nullptr) return call.Fail(errno != 0 ? errno : ENOSYS);
  Napi::Array devices = Napi::Array::New(env);
  for (int i = 0; i < count; i++) {
    ibv_device* device = list[i];
    Napi::Object entry = Napi::Object::New(env);
    entry.Set("name", ibv_get_device_name(device));
    entry.Set("nodeGuid", FormatGuid(ibv_get_device_guid(device)));
    entry.Set("nodeType", ibv_node_type_str(device->node_type));
    Napi::Array ports = Napi::Array::New(env);
    entry.Set("ports", ports);
    ibv_context* context = ibv_open_device(device);
    if (context == nullptr) {
      entry.Set("error", std::string("ibv_open_device: ") + std::strerror(errno));
    } else {
      ibv_device_attr attr {};
      int code = ibv_query_device(context, &attr);
      if (code != 0) {
        entry.Set("error", std::string("ibv_query_device: ") + std::strerror(code));
      } else {
        for (uint8_t port = 1; port <= attr.phys_port_cnt; port++) {
          Napi::Object item = Napi::Object::New(env);
          item.Set("port", static_cast<double>(port));
          ibv_port_attr port_attr {};
          code = ibv_query_port(context, port, &port_attr);
          if (code != 0) {
            item.Set("error", std::string("ibv_query_port: ") + std::strerror(code));
          } else {
            item.Set("state", PortStateName(port_attr.state));
            item.Set("activeMtu", static_cast<double>(MtuBytes(port_attr.active_mtu)));
            item.Set("linkLayer", LinkLayerName(port_attr.link_layer));
          }
          ports.Set(ports.Length(), item);
        }
      }
      ibv_close_device(context);
    }
    devices.Set(devices.Length(), entry);
  }
  ibv_free_device_list(list);
  return devices;
}

// ibv_is_fork_initialized (rdma-core >= 35): "disabled", "enabled" or "unneeded". libibverbs
// learns whether the kernel copies pinned pages on fork when it initialises, on the first
// ibv_get_device_list; this makes sure that has happened.
Napi::Value IbvForkStatus(const Napi::CallbackInfo& info) {
  int count = 0;
  ibv_device** list = ibv_get_device_list(&count);
  if (list != nullptr) ibv_free_device_list(list);
  switch (ibv_is_fork_initialized()) {
    case IBV_FORK_ENABLED: return Napi::String::New(info.Env(), "enabled");
    case IBV_FORK_UNNEEDED: return Napi::String::New(info.Env(), "unneeded");
    default: return Napi::String::New(info.Env(), "disabled");
  }
}

// The name of the device behind an ibv_context handle (from getIbvContext).
Napi::Value IbvContextDeviceName(const Napi::CallbackInfo& info) {
  Call call(info.Env(), "ibv_get_device_name", Domain::Rpma);
  IbvContext* context = Open<IbvContext>(call, info[0]);
  if (context == nullptr) return info.Env().Undefined();
  return Napi::String::New(info.Env(), ibv_get_device_name(context->context->device));
}

// How this addon was built.
Napi::Value BuildInfo(const Napi::CallbackInfo& info) {
  Napi::Object result = Napi::Object::New(info.Env());
  result.Set("napiVersion", static_cast<double>(NAPI_VERSION));
  return result;
}

// ---------------------------------------------------------------------------------------------

}  // namespace

void RegisterPeer(Napi::Env env, Napi::Object exports) {
  exports.Set("getIbvContext", Napi::Function::New(env, GetIbvContext, "getIbvContext"));
  exports.Set("peerNew", Napi::Function::New(env, PeerNew, "peerNew"));
  exports.Set("peerDelete", Napi::Function::New(env, PeerDelete, "peerDelete"));
  // The doctor's.
  exports.Set("ibvDevices", Napi::Function::New(env, IbvDevices, "ibvDevices"));
  exports.Set("ibvForkStatus", Napi::Function::New(env, IbvForkStatus, "ibvForkStatus"));
  exports.Set("ibvContextDeviceName", Napi::Function::New(env, IbvContextDeviceName, "ibvContextDeviceName"));
  exports.Set("buildInfo", Napi::Function::New(env, BuildInfo, "buildInfo"));
}

}  // namespace rdma
