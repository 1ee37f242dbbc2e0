// postWindow: a window of plain writes, reads, sends and receives on a connection in one call, each
// request as numbers (JavaScript reads core's WorkRequest through its inline caches, where post's
// napi_get_property takes a lookup per field). The same checks and refusals as post.cc's, in the same
// order and words (post.h), and the same rpma calls; posted in order up to the first refusal.
#include <librpma.h>
#include <napi.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "conn_common.h"
#include "errors.h"
#include "handles.h"
#include "post.h"

namespace rdma {

using namespace conn;

namespace {

// A request's numbers, in this order (the driver's window.ts packs them). A write's and a read's
// regions are `dst` and `src` as in the request; a send's is `src`, a receive's `dst`, with the
// request's `offset` beside it.
enum Field { kOp, kId, kDst, kDstOffset, kSrc, kSrcOffset, kLength, kFlags, kImm, kFields };
constexpr double kOnError = 1;  // completion "onError"
constexpr double kWithImm = 2;  // imm given
// A bound on one call's requests (the driver's windows hold 32): a count past it is refused.
constexpr double kMaxWindow = 1024;

constexpr post::Op kOps[] = {post::Op::Write, post::Op::Read, post::Op::Send, post::Op::Recv};

// The refusal `call` made (thrown already), with `posted`: how many requests before it were posted.
Napi::Value Refused(const Call& call, std::size_t posted) {
  SetPosted(call.Env(), posted);
  return call.Env().Undefined();
}

// The window's regions, each opened as the kind a request needs the first time it needs it.
struct Region {
  Napi::Value value;
  MrLocal* local = nullptr;
  MrRemote* remote = nullptr;
};

// The region at index `at` (a number from the window) as T, or nullptr after a refusal.
template <typename T>
T* RegionAt(const Call& call, std::vector<Region>& regions, double at, const char* what) {
  double index = 0;
  if (regions.empty()) return call.Invalid(std::string(what) + " names a region, but regions is empty"), nullptr;
  if (!Integer(call, at, what, static_cast<double>(regions.size() - 1), &index)) return nullptr;
  Region& region = regions[static_cast<std::size_t>(index)];
  if constexpr (std::is_same_v<T, MrLocal>) {
    if (region.local == nullptr) region.local = Open<MrLocal>(call, region.value);
    return region.local;
  } else {
    if (region.remote == nullptr) region.remote = Open<MrRemote>(call, region.value);
    return region.remote;
  }
}

// Posts request `fields` on `conn`; false after a refusal (thrown through `call`).
bool PostOne(const Call& call, ConnState& conn, post::Op op, const double* fields, std::vector<Region>& regions) {
  bool recv = op == post::Op::Recv;
  if (recv && conn.srq) return call.Invalid("the connection was made with a shared receive queue: post receives there"), false;
  double flag_bits = 0, imm = 0, dst_offset = 0, src_offset = 0, length = 0;
  if (!Integer(call, fields[kFlags], "flags", kOnError + kWithImm, &flag_bits)) return false;
  int flags = 0;
  auto bits = static_cast<int>(flag_bits);
  bool with_imm = (bits & static_cast<int>(kWithImm)) != 0;
  if (!post::SignalFlags(call, true, (bits & static_cast<int>(kOnError)) != 0, recv, &flags)) return false;
  if (with_imm && !post::ImmediateAllowed(call, op == post::Op::Write || op == post::Op::Send)) return false;
  if (with_imm && !Integer(call, fields[kImm], "imm", UINT32_MAX, &imm)) return false;
  MrRemote* remote = nullptr;
  MrLocal* local = nullptr;
  if (op == post::Op::Write || op == post::Op::Read) {
    bool write = op == post::Op::Write;
    remote = RegionAt<MrRemote>(call, regions, fields[write ? kDst : kSrc], write ? "dst" : "src");
    if (remote == nullptr) return false;
    local = RegionAt<MrLocal>(call, regions, fields[write ? kSrc : kDst], write ? "src" : "dst");
    if (local == nullptr || !Integer(call, fields[kDstOffset], "dst_offset", kMaxSafe, &dst_offset) ||
        !Integer(call, fields[kSrcOffset], "src_offset", kMaxSafe, &src_offset) ||
        !Integer(call, fields[kLength], "len", kMaxLength, &length)) {
      return false;
    }
  } else {
    Field at = recv ? kDst : kSrc;
    local = RegionAt<MrLocal>(call, regions, fields[at], recv ? "dst" : "src");
    if (local == nullptr || !Integer(call, fields[at + 1], "offset", kMaxSafe, &src_offset) ||
        !Integer(call, fields[kLength], "len", kMaxLength, &length)) {
      return false;
    }
  }
  uint64_t token = conn.next_token++;
  const void* context = reinterpret_cast<const void*>(static_cast<uintptr_t>(token));
  ClearLog();
  int code = post::PostData(conn.conn, op, remote != nullptr ? remote->mr : nullptr, local->state->mr, dst_offset,
                            src_offset, length, flags, with_imm, imm, context);
  std::string log = TakeLog();
  if (code != 0) return call.Fail(code, log), false;
  Posted posted;
  posted.id = fields[kId];
  posted.signalled = flags == RPMA_F_COMPLETION_ALWAYS;
  posted.recv = recv;
  posted.hold = InFlight(local->state);
  conn.posted.emplace(token, std::move(posted));
  return true;
}

// postWindow(conn, regions, fields, count): `count` requests, kFields numbers each in `fields` (a
// Float64Array), their regions indexes into `regions`. Returns `count`, or -1 (nothing posted) when
// `conn` is a shared receive queue or a connection request: post each there. A refusal is thrown
// with `posted`, how many requests before it were posted.
Napi::Value PostWindow(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Call guard(env, "rpma_write", Domain::Rpma);
  Kind kind;
  if (Opened<Conn>(info[0]) == nullptr && KindOf(info[0], &kind) && (kind == Kind::Srq || kind == Kind::ConnReq)) {
    return Napi::Number::New(env, -1);
  }
  // Every region is read before anything is opened or checked: a getter or a Proxy trap runs
  // JavaScript, which could otherwise close a handle or detach `fields` between a check and a use.
  double count = 0;
  if (!info[3].IsNumber()) return guard.Invalid("count must be a number"), Refused(guard, 0);
  if (!info[1].IsArray()) return guard.Invalid("regions must be an array of region handles"), Refused(guard, 0);
  auto list = info[1].As<Napi::Array>();
  uint32_t size = list.Length();
  if (size > 2 * kMaxWindow) return guard.Invalid("regions holds more than a window names"), Refused(guard, 0);
  std::vector<Region> regions(size);
  for (uint32_t i = 0; i < size; i++) {
    regions[i].value = list.Get(i);
    if (env.IsExceptionPending()) return guard.Invalid("reading the regions threw"), Refused(guard, 0);
  }
  napi_typedarray_type type = napi_uint8_array;
  std::size_t length = 0;
  void* data = nullptr;
  if (napi_get_typedarray_info(env, info[2], &type, &length, &data, nullptr, nullptr) != napi_ok || type != napi_float64_array) {
    return guard.Invalid("fields must be a Float64Array"), Refused(guard, 0);
  }
  double capacity = std::min(static_cast<double>(length / kFields), kMaxWindow);
  if (!Integer(guard, info[3].As<Napi::Number>().DoubleValue(), "count", capacity, &count)) return Refused(guard, 0);
  const double* fields = static_cast<const double*>(data);
  auto total = static_cast<std::size_t>(count);
  Conn* handle = Opened<Conn>(info[0]);
  if (total == 0 && handle == nullptr && Open<Conn>(guard, info[0]) == nullptr) return Refused(guard, 0);
  for (std::size_t i = 0; i < total; i++) {
    const double* request = fields + i * kFields;
    double op = 0;
    if (!Integer(guard, request[kOp], "op", 3, &op)) return Refused(guard, i);
    Call call(env, post::OperationName(kOps[static_cast<int>(op)]), Domain::Rpma);
    // Refused as post refuses it: named after the first request, before any of its fields is read.
    // No JavaScript runs from here on, so the connection stays open once it is.
    if (handle == nullptr && (handle = Open<Conn>(call, info[0])) == nullptr) return Refused(call, i);
    if (!PostOne(call, *handle->state, kOps[static_cast<int>(op)], request, regions)) return Refused(call, i);
  }
  return Napi::Number::New(env, count);
}

}  // namespace

void RegisterPostWindow(Napi::Env env, Napi::Object exports) {
  exports.Set("postWindow", Napi::Function::New(env, PostWindow, "postWindow"));
}

}  // namespace rdma
