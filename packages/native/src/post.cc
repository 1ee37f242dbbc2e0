// Work requests (rpma_write / read / flush / atomic_write / send / recv) on a connection.
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
  Conn* handle = Open<Conn>(call, info[0]);
  if (handle == nullptr) return env.Undefined();
  if (!f.id.IsNumber()) return call.Invalid("id must be a number");

  ConnState& conn = *handle->state;
  if (op == "recv" && conn.srq) {
    return call.Invalid("the connection was made with a shared receive queue: post receives there");
  }
  uint64_t token = conn.next_token++;
  const void* context = reinterpret_cast<const void*>(static_cast<uintptr_t>(token));
  std::string signal = f.completion.IsString() ? f.completion.As<Napi::String>().Utf8Value() : "";
  if (!f.completion.IsUndefined() && signal != "always" && !(signal == "onError" && op != "recv")) {
    return call.Invalid("completion must be \"always\" or \"onError\" (a receive always completes)");
  }
  const int flags = signal == "onError" ? RPMA_F_COMPLETION_ON_ERROR : RPMA_F_COMPLETION_ALWAYS;
  bool with_imm = !f.imm.IsUndefined();
  double imm = 0;
  if (with_imm && op != "write" && op != "send") return call.Invalid("immediate data goes with a write or a send only");
  if (with_imm && !Integer(call, f.imm, "imm", UINT32_MAX, &imm)) return env.Undefined();
  Posted posted;
  posted.id = f.id.As<Napi::Number>().DoubleValue();
  posted.signalled = flags == RPMA_F_COMPLETION_ALWAYS;
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
    code = write && with_imm
               ? rpma_write_with_imm(conn.conn, remote->mr, static_cast<size_t>(dst_offset), local->state->mr,
                                     static_cast<size_t>(src_offset), static_cast<size_t>(length), flags,
                                     static_cast<uint32_t>(imm), context)
           : write ? rpma_write(conn.conn, remote->mr, static_cast<size_t>(dst_offset), local->state->mr,
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
    code = send && with_imm
               ? rpma_send_with_imm(conn.conn, local->state->mr, static_cast<size_t>(src_offset),
                                    static_cast<size_t>(length), flags, static_cast<uint32_t>(imm), context)
           : send ? rpma_send(conn.conn, local->state->mr, static_cast<size_t>(src_offset), static_cast<size_t>(length),
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

}  // namespace

void RegisterPost(Napi::Env env, Napi::Object exports) {
  exports.Set("post", Napi::Function::New(env, Post, "post"));
}

}  // namespace rdma
