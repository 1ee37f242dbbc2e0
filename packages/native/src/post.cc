// Work requests: rpma_write / read / flush / atomic_write / send / recv on a connection,
// rpma_srq_recv on a shared receive queue, rpma_conn_req_recv on a connection request. Each is
// held (its region registered) until completions.cc returns its completion. The TypeScript
// driver's postMany calls post once per request (post_window.cc's postWindow takes a window of
// plain writes, reads, sends and receives in one call) and pollCompletions once after them.
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
#include "post.h"

namespace rdma {

using namespace conn;

namespace {

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
  Napi::Value id, dst, src, dst_offset, src_offset, offset, length, type, value, imm, completion;
};

bool ReadField(const Call& call, Napi::Object object, const char* key, Napi::Value* out) {
  *out = object.Get(key);
  if (!call.Env().IsExceptionPending()) return true;
  call.Invalid(std::string("reading the work request's ") + key + " threw");
  return false;
}

// What every request says apart from its regions and numbers: its id, whether it is signalled,
// its immediate data. Into `posted`, `flags` and `imm`; false after a refusal.
bool ReadCommon(const Call& call, const std::string& op, const RequestFields& f, Posted* posted, int* flags,
                bool* with_imm, double* imm) {
  if (!f.id.IsNumber()) return call.Invalid("id must be a number"), false;
  std::string signal = f.completion.IsString() ? f.completion.As<Napi::String>().Utf8Value() : "";
  bool valid = f.completion.IsUndefined() || signal == "always" || signal == "onError";
  if (!post::SignalFlags(call, valid, signal == "onError", op == "recv", flags)) return false;
  *with_imm = !f.imm.IsUndefined();
  if (*with_imm && !post::ImmediateAllowed(call, op == "write" || op == "send")) return false;
  if (*with_imm && !Integer(call, f.imm, "imm", UINT32_MAX, imm)) return false;
  posted->id = f.id.As<Napi::Number>().DoubleValue();
  posted->signalled = *flags == RPMA_F_COMPLETION_ALWAYS;
  posted->recv = op == "recv";
  return true;
}

// A receive on a shared receive queue (rpma_srq_recv) or on a connection request before it is
// connected (rpma_conn_req_recv): neither takes anything else.
Napi::Value PostReceive(Napi::Env env, Napi::Value queue, Kind kind, const std::string& op, const char* operation,
                        const RequestFields& f) {
  bool srq = kind == Kind::Srq;
  if (op != "recv") {
    return Call(env, operation, Domain::Rpma)
        .Invalid(srq ? "a shared receive queue takes receives only: post " + op + " on a connection"
                     : "a connection request takes receives only (rpma_conn_req_recv): post " + op +
                           " once it is connected");
  }
  Call call(env, srq ? "rpma_srq_recv" : "rpma_conn_req_recv", Domain::Rpma);
  Posted posted;
  int flags = 0;
  bool with_imm = false;
  double imm = 0, offset = 0, length = 0;
  if (!ReadCommon(call, op, f, &posted, &flags, &with_imm, &imm)) return env.Undefined();
  SrqState* srq_state = nullptr;
  ConnReqState* req_state = nullptr;
  if (srq) {
    Srq* handle = Open<Srq>(call, queue);
    if (handle == nullptr) return env.Undefined();
    srq_state = handle->state.get();
  } else {
    ConnReq* handle = Open<ConnReq>(call, queue);
    if (handle == nullptr) return env.Undefined();
    req_state = handle->state.get();
    if (req_state->config.srq) return call.Invalid("the request was made with a shared receive queue: post receives there");
  }
  MrLocal* dst = Open<MrLocal>(call, f.dst);
  if (dst == nullptr || !Integer(call, f.offset, "offset", kMaxSafe, &offset) ||
      !Integer(call, f.length, "len", kMaxLength, &length)) {
    return env.Undefined();
  }
  PostedMap& held = srq ? srq_state->posted : req_state->posted;
  uint64_t token = srq ? srq_state->next_token++ : req_state->next_token++;
  const void* context = reinterpret_cast<const void*>(static_cast<uintptr_t>(token));
  ClearLog();
  int code = srq ? rpma_srq_recv(srq_state->srq, dst->state->mr, static_cast<size_t>(offset), static_cast<size_t>(length),
                                 context)
                 : rpma_conn_req_recv(req_state->req, dst->state->mr, static_cast<size_t>(offset),
                                      static_cast<size_t>(length), context);
  std::string log = TakeLog();
  if (code != 0) return call.Fail(code, log);
  posted.hold = InFlight(dst->state);
  held.emplace(token, std::move(posted));
  return env.Undefined();
}

// post(queue, request): one work request on a connection, a shared receive queue or a connection
// request. The connection is the hot path: one type-tag check finds it.
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
      !ReadField(call, request, "value", &f.value) || !ReadField(call, request, "imm", &f.imm) ||
      !ReadField(call, request, "completion", &f.completion)) {
    return env.Undefined();
  }
  Conn* handle = Opened<Conn>(info[0]);
  if (handle == nullptr) {
    Kind kind;
    if (KindOf(info[0], &kind) && (kind == Kind::Srq || kind == Kind::ConnReq)) {
      return PostReceive(env, info[0], kind, op, operation, f);
    }
    handle = Open<Conn>(call, info[0]);  // the refusal names what was expected
    if (handle == nullptr) return env.Undefined();
  }

  ConnState& conn = *handle->state;
  if (op == "recv" && conn.srq) {
    return call.Invalid("the connection was made with a shared receive queue: post receives there");
  }
  Posted posted;
  int flags = 0;
  bool with_imm = false;
  double imm = 0;
  if (!ReadCommon(call, op, f, &posted, &flags, &with_imm, &imm)) return env.Undefined();
  uint64_t token = conn.next_token++;
  const void* context = reinterpret_cast<const void*>(static_cast<uintptr_t>(token));
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
    code = post::PostData(conn.conn, write ? post::Op::Write : post::Op::Read, remote->mr, local->state->mr, dst_offset,
                          src_offset, length, flags, with_imm, imm, context);
    posted.hold = InFlight(local->state);
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
    code = post::PostData(conn.conn, send ? post::Op::Send : post::Op::Recv, nullptr, local->state->mr, 0, src_offset,
                          length, flags, with_imm, imm, context);
    posted.hold = InFlight(local->state);
  }
  std::string log = TakeLog();
  if (code != 0) return call.Fail(code, log);
  conn.posted.emplace(token, std::move(posted));
  return env.Undefined();
}

}  // namespace

namespace post {

const char* OperationName(Op op) {
  switch (op) {
    case Op::Write: return "rpma_write";
    case Op::Read: return "rpma_read";
    case Op::Send: return "rpma_send";
    case Op::Recv: return "rpma_recv";
  }
  return "rpma_write";
}

bool SignalFlags(const Call& call, bool valid, bool on_error, bool recv, int* flags) {
  if (!valid || (on_error && recv)) {
    return call.Invalid("completion must be \"always\" or \"onError\" (a receive always completes)"), false;
  }
  *flags = on_error ? RPMA_F_COMPLETION_ON_ERROR : RPMA_F_COMPLETION_ALWAYS;
  return true;
}

bool ImmediateAllowed(const Call& call, bool write_or_send) {
  return write_or_send || (call.Invalid("immediate data goes with a write or a send only"), false);
}

int PostData(rpma_conn* conn, Op op, rpma_mr_remote* remote, rpma_mr_local* local, double dst_offset,
             double src_offset, double length, int flags, bool with_imm, double imm, const void* context) {
  auto dst = static_cast<size_t>(dst_offset);
  auto src = static_cast<size_t>(src_offset);
  auto len = static_cast<size_t>(length);
  auto value = static_cast<uint32_t>(imm);
  switch (op) {
    case Op::Write:
      return with_imm ? rpma_write_with_imm(conn, remote, dst, local, src, len, flags, value, context)
                      : rpma_write(conn, remote, dst, local, src, len, flags, context);
    case Op::Read: return rpma_read(conn, local, dst, remote, src, len, flags, context);
    case Op::Send:
      return with_imm ? rpma_send_with_imm(conn, local, src, len, flags, value, context)
                      : rpma_send(conn, local, src, len, flags, context);
    case Op::Recv: return rpma_recv(conn, local, src, len, context);
  }
  return RPMA_E_INVAL;
}

}  // namespace post

void RegisterPost(Napi::Env env, Napi::Object exports) {
  exports.Set("post", Napi::Function::New(env, Post, "post"));
}

}  // namespace rdma
