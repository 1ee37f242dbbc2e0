// librdmacm's verbs API, the data path (see cm_ep.h): posting on an endpoint's queue pair
// (rdma_post_send(v) / rdma_post_recv(v) / rdma_post_read(v) / rdma_post_write(v) are inline
// wrappers of ibv_post_send / ibv_post_recv, called here directly so that immediate data and
// inline sends take the same path), and the completions of its two CQs, read without waiting or
// waited for on their one completion channel.
#include <arpa/inet.h>
#include <infiniband/verbs.h>
#include <napi.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "cm_ep.h"
#include "conn_common.h"
#include "errors.h"
#include "handles.h"
#include "keys.h"

namespace rdma {

using conn::Integer;
using conn::kMaxLength;
using conn::kMaxSafe;

PostedRequests<CmHold>::iterator CmEpState::Forget(PostedRequests<CmHold>::iterator entry) {
  (entry->second.recv ? recvs_posted : sends_posted)--;
  return posted.erase(entry);
}

template <typename Take>
int CmEpState::DrainWith(uint32_t max, uint32_t* count, Take take) {
  constexpr uint32_t kBatch = 32;
  ibv_wc wc[kBatch];
  for (ibv_cq* cq : {send_cq, recv_cq}) {
    if (cq == nullptr) continue;
    while (*count < max) {
      // Never more than the caller can take: a completion polled is gone from the CQ.
      int want = static_cast<int>(std::min(kBatch, max - *count));
      int got = ibv_poll_cq(cq, want, wc);
      if (got < 0) return EIO;  // ibv_poll_cq says only that it failed
      for (int i = 0; i < got; i++) {
        auto found = posted.find(wc[i].wr_id);
        if (found == posted.end()) continue;  // not a request of ours
        // A send-queue request's completion covers the unsignalled ones posted before it.
        if (!found->second.recv) ForgetCovered(posted, found, [this](PostedRequests<CmHold>::iterator it) { return Forget(it); });
        CmPosted request = std::move(found->second);
        Forget(found);
        take(request, wc[i]);
        (*count)++;
      }
      if (got < want) break;
    }
  }
  return 0;
}

namespace {

// A completion's fields as users read them: a failed one reports no length, opcode or flags.
struct CompletionFields {
  double status, byte_length, opcode;
  unsigned flags;
  bool has_imm;
  double imm;  // put on the wire in network byte order (htonl), as librdmacm's users do
};

CompletionFields FieldsOf(const CmPosted& request, const ibv_wc& wc) {
  bool ok = wc.status == IBV_WC_SUCCESS;
  unsigned flags = ok ? wc.wc_flags : 0;
  bool has_imm = (flags & IBV_WC_WITH_IMM) != 0;
  return {static_cast<double>(wc.status), request.recv && ok ? static_cast<double>(wc.byte_len) : 0,
          ok ? static_cast<double>(wc.opcode) : -1, flags, has_imm, has_imm ? static_cast<double>(ntohl(wc.imm_data)) : 0};
}

}  // namespace

int CmEpState::Drain(Napi::Env env, Napi::Array out, uint32_t* count) {
  Keys keys = CallKeys(env);
  return DrainWith(UINT32_MAX, count, [&](const CmPosted& request, const ibv_wc& wc) {
    CompletionFields f = FieldsOf(request, wc);
    DefineElement(env, out, *count,
                  CompletionObject(env, keys, request.id, f.status, f.byte_length, f.opcode, static_cast<double>(f.flags),
                                   f.has_imm ? &f.imm : nullptr, nullptr));
  });
}

int CmEpState::DrainPacked(double* out, uint32_t capacity, uint32_t* count) {
  return DrainWith(capacity, count, [&](const CmPosted& request, const ibv_wc& wc) {
    CompletionFields f = FieldsOf(request, wc);
    double* at = out + static_cast<std::size_t>(*count) * kCompletionFields;
    at[0] = request.id;
    at[1] = f.status;
    at[2] = f.byte_length;
    at[3] = f.opcode;
    at[4] = static_cast<double>(f.flags);
    at[5] = f.imm;
  });
}

void CmEpState::OnCompletion(Napi::Env env, int status) {
  std::shared_ptr<CmEpState> keep = shared_from_this();  // a callback may destroy the endpoint
  if (status < 0) {
    conn::FailAll(env, completions, "ibv_get_cq_event", status, Domain::Errno);
    return;
  }
  // Serves the waiters there now: one that a callback adds is served when the channel is next
  // readable (epoll reports it level-triggered), without a read here that would find nothing.
  std::size_t waiting = completions.waiters.size();
  while (waiting > 0 && comp_channel != nullptr && id != nullptr && !completions.waiters.empty()) {
    // Takes the events on the channel, acknowledging each, then re-arms the CQs they came from;
    // only then drains both, so that a completion arriving after the drain raises a new event. A
    // CQ raises one event per arming and is re-armed only here: once both CQs' events are read the
    // channel holds no more, and the read that would find nothing is saved.
    int errnum = 0;
    const char* operation = "ibv_get_cq_event";
    ibv_cq* fired[2] = {nullptr, nullptr};
    int events = 0;
    while (events < 2) {
      ibv_cq* cq = nullptr;
      void* context = nullptr;
      errno = 0;
      if (ibv_get_cq_event(comp_channel, &cq, &context) != 0) {
        int failed = errno != 0 ? errno : EIO;
        if (failed != EAGAIN && failed != EWOULDBLOCK) errnum = failed;
        break;
      }
      ibv_ack_cq_events(cq, 1);
      if (events == 0 || cq != fired[0]) fired[events] = cq;
      events++;
    }
    for (int i = 0; i < events && errnum == 0; i++) {
      if (fired[i] != nullptr && (errnum = ibv_req_notify_cq(fired[i], 0)) != 0) operation = "ibv_req_notify_cq";
    }
    if (errnum == 0 && events == 0) break;  // nothing more on the channel: wait on
    // A packed wait's completions go into its array (no object made here), the count answered.
    Waiter& front = completions.waiters.front();
    bool packed = !front.into.IsEmpty();
    Napi::Array out = packed ? Napi::Array() : Napi::Array::New(env);
    uint32_t count = 0;
    std::string detail;
    if (errnum == 0) {
      operation = "ibv_poll_cq";
      double* into = nullptr;
      uint32_t capacity = 0;
      if (!packed) {
        errnum = Drain(env, out, &count);
      } else if (conn::CompletionRowsOf(env, front.into.Value(), kCompletionFields, &into, &capacity)) {
        errnum = DrainPacked(into, capacity, &count);
      } else {
        errnum = EINVAL;  // detached since the wait began: nothing read, the completions stay queued
        detail = "the completions' array is no longer a Float64Array that holds one";
      }
      if (errnum == 0 && count == 0) continue;  // already taken by an earlier poll: wait on
    }
    Waiter waiter = std::move(front);
    completions.waiters.pop_front();
    waiting--;
    if (count != 0) {
      Deliver(env, waiter, nullptr, packed ? Napi::Value(Napi::Number::New(env, count)) : Napi::Value(out), true);
    } else {
      Deliver(env, waiter, ErrnoValue(env, errnum, operation, detail), nullptr, true);
    }
  }
  completions.PauseIfIdle();
}

namespace {

const char* OperationOf(std::string_view op) {
  return op == "send" ? "rdma_post_send" : op == "recv" ? "rdma_post_recv" : op == "read" ? "rdma_post_read" : "rdma_post_write";
}

// A string field's text in `buffer` (which holds the few words a request's fields take), without
// std::string's allocation; empty when `value` is no string or is longer than the buffer holds.
template <std::size_t N>
std::string_view Word(Napi::Value value, char (&buffer)[N]) {
  std::size_t length = 0;
  if (!value.IsString() || napi_get_value_string_utf8(value.Env(), value, buffer, N, &length) != napi_ok) return {};
  return length < N - 1 ? std::string_view(buffer, length) : std::string_view();
}

// Plain bytes (a Uint8Array in place of a region) as a scatter/gather entry for an inline request:
// IBV_SEND_INLINE copies them when the request is posted, so the device never reads them and the
// lkey is not looked at. Bounded by the array's real length, whatever its getters say.
bool ReadPlainBytes(const Call& call, const CmEpState& ep, uint32_t i, Napi::Value bytes, Napi::Value offset_value,
                    Napi::Value length_value, std::vector<ibv_sge>* sges, CmPosted* entry) {
  napi_typedarray_type type = napi_int8_array;
  std::size_t size = 0;
  void* data = nullptr;
  if (napi_get_typedarray_info(call.Env(), bytes, &type, &size, &data, nullptr, nullptr) != napi_ok || type != napi_uint8_array) {
    return call.Invalid("segment " + std::to_string(i) + "'s mr must be a region (from cmReg) or a Uint8Array"), false;
  }
  double offset, length;
  if (!Integer(call, offset_value, "offset", kMaxSafe, &offset) || !Integer(call, length_value, "length", kMaxLength, &length)) {
    return false;
  }
  if (offset + length > static_cast<double>(size)) {
    return call.Invalid("segment " + std::to_string(i) + " (offset " + conn::NumberText(offset) + ", length " +
                        conn::NumberText(length) + ") passes the bytes' end (" + std::to_string(size) + " bytes)"),
           false;
  }
  if (length > ep.config.max_inline_data) {
    return call.Invalid(conn::NumberText(length) + " plain bytes cannot go inline: the queue pair takes at most " +
                        std::to_string(ep.config.max_inline_data) + " (maxInlineData); send more from a region"),
           false;
  }
  const uint8_t* from = static_cast<const uint8_t*>(data) + static_cast<std::size_t>(offset);
  std::vector<uint8_t>& copy = entry->hold.plain_bytes.emplace_back(from, from + static_cast<std::size_t>(length));
  ibv_sge sge{};
  sge.addr = reinterpret_cast<uintptr_t>(copy.data());
  sge.length = static_cast<uint32_t>(length);
  sges->push_back(sge);
  return true;
}

// Segment `i` on the open region `mr`, its offset and length read already, as a scatter/gather
// entry; the region into `entry`.
bool SegmentOn(const Call& call, CmEpState& ep, uint32_t i, CmMr* mr, double offset, double length,
               std::vector<ibv_sge>* sges, CmPosted* entry) {
  if (mr->state->ep.get() != &ep) {
    return call.Invalid("segment " + std::to_string(i) +
                        "'s region is registered on another endpoint's protection domain: register it on this one"),
           false;
  }
  if (!Integer(call, offset, "offset", kMaxSafe, &offset) || !Integer(call, length, "length", kMaxLength, &length)) {
    return false;
  }
  ibv_mr* region = mr->state->mr;
  if (offset + length > static_cast<double>(region->length)) {
    return call.Invalid("segment " + std::to_string(i) + " (offset " + conn::NumberText(offset) + ", length " +
                        conn::NumberText(length) + ") passes the region's end (" + std::to_string(region->length) + " bytes)"),
           false;
  }
  ibv_sge sge{};
  sge.addr = reinterpret_cast<uintptr_t>(region->addr) + static_cast<uint64_t>(offset);
  sge.length = static_cast<uint32_t>(length);
  sge.lkey = region->lkey;
  sges->push_back(sge);
  entry->hold.regions.push_back(mr->state);
  return true;
}

// Segment `i` of a request (its `mr`, `offset` and `length`) as a scatter/gather entry on a region
// of `ep`, the region into `entry`; or plain bytes (copied into `entry`) (`*plain` set), which only an inline send or
// write may carry (BuildRequest checks).
bool ReadSegment(const Call& call, CmEpState& ep, uint32_t i, Napi::Value mr_value, Napi::Value offset_value,
                 Napi::Value length_value, std::vector<ibv_sge>* sges, CmPosted* entry, bool* plain) {
  if (mr_value.IsTypedArray()) {
    *plain = true;
    return ReadPlainBytes(call, ep, i, mr_value, offset_value, length_value, sges, entry);
  }
  CmMr* mr = Open<CmMr>(call, mr_value);
  if (mr == nullptr) return false;
  if (mr->state->ep.get() == &ep && (!offset_value.IsNumber() || !length_value.IsNumber())) {
    double unused;
    return Integer(call, offset_value, "offset", kMaxSafe, &unused) && Integer(call, length_value, "length", kMaxLength, &unused);
  }
  return SegmentOn(call, ep, i, mr, offset_value.IsNumber() ? offset_value.As<Napi::Number>().DoubleValue() : 0,
                   length_value.IsNumber() ? length_value.As<Napi::Number>().DoubleValue() : 0, sges, entry);
}

// A request's segments as scatter/gather entries on regions of `ep` (or plain bytes); their regions into `entry`.
bool ReadSegments(const Call& call, Keys& keys, CmEpState& ep, Napi::Value value, std::vector<ibv_sge>* sges,
                  CmPosted* entry, bool* plain) {
  if (!value.IsArray()) return call.Invalid("segments must be an array of { mr, offset, length }"), false;
  Napi::Array list = value.As<Napi::Array>();
  uint32_t size = list.Length();
  if (size == 0) return call.Invalid("a request needs at least one segment"), false;
  if (size > 64) return call.Invalid("a request has at most 64 segments"), false;
  for (uint32_t i = 0; i < size; i++) {
    Napi::Value item = list.Get(i);
    if (call.Env().IsExceptionPending()) return call.Invalid("reading segments threw"), false;
    if (!item.IsObject()) return call.Invalid("segment " + std::to_string(i) + " must be an object"), false;
    Napi::Object segment = item.As<Napi::Object>();
    Napi::Value fields[3] = {segment.Get(keys[Key::Mr]), segment.Get(keys[Key::Offset]), segment.Get(keys[Key::Length])};
    if (call.Env().IsExceptionPending()) return call.Invalid("reading a segment threw"), false;
    if (!ReadSegment(call, ep, i, fields[0], fields[1], fields[2], sges, entry, plain)) return false;
  }
  return true;
}

bool IsOp(std::string_view op) { return op == "send" || op == "recv" || op == "read" || op == "write"; }
constexpr const char* kOpRefused = "op must be send, recv, read or write";

// A request's fields other than its op and segments, in this order.
enum Field { kId, kImm, kInline, kCompletion, kRemoteAddress, kRkey, kFields };

// Where a request's segments come from: its `segments` array, or one segment given field by field.
struct Segments {
  Napi::Value list;
  Napi::Value one[3];  // mr, offset, length, when `list` is empty
};

// A request's fields as JavaScript values (cmPost, cmPostOne). Each read checks its field: a
// refusal is thrown through `call` and the read returns false.
struct ValueFields {
  const Napi::Value (&fields)[kFields];
  const Segments& from;
  Keys& keys;

  bool Id(const Call& call, double* id) const {
    if (!fields[kId].IsNumber()) return call.Invalid("id must be a number"), false;
    *id = fields[kId].As<Napi::Number>().DoubleValue();
    return true;
  }
  bool SegmentsOf(const Call& call, CmEpState& state, std::vector<ibv_sge>* sges, CmPosted* entry, bool* plain) const {
    return from.list.IsEmpty() ? ReadSegment(call, state, 0, from.one[0], from.one[1], from.one[2], sges, entry, plain)
                               : ReadSegments(call, keys, state, from.list, sges, entry, plain);
  }
  // Immediate data, when there is any (`*has`); a read's is refused by the caller.
  bool Imm(const Call& call, bool* has, double* imm) const {
    *has = ImmPresent();
    return !*has || Integer(call, fields[kImm], "imm", 4294967295.0, imm);
  }
  bool ImmPresent() const { return !fields[kImm].IsUndefined(); }
  bool Inline(const Call& call, bool* inline_data) const {
    if (!fields[kInline].IsUndefined() && !fields[kInline].IsBoolean()) return call.Invalid("inline must be a boolean"), false;
    *inline_data = fields[kInline].IsBoolean() && fields[kInline].As<Napi::Boolean>().Value();
    return true;
  }
  bool Signalled(const Call& call, bool* signalled) const {
    char signal_text[16];
    std::string_view signal = Word(fields[kCompletion], signal_text);
    if (!fields[kCompletion].IsUndefined() && signal != "always" && signal != "onError") {
      return call.Invalid("completion must be \"always\" or \"onError\""), false;
    }
    *signalled = signal != "onError";
    return true;
  }
  bool RemoteAddress(const Call& call, uint64_t* address) const {
    bool lossless = false;
    *address = fields[kRemoteAddress].IsBigInt() ? fields[kRemoteAddress].As<Napi::BigInt>().Uint64Value(&lossless) : 0;
    if (!lossless) return call.Invalid("remoteAddress must be a bigint from 0 to 2^64 - 1"), false;
    return true;
  }
  bool Rkey(const Call& call, double* rkey) const { return Integer(call, fields[kRkey], "rkey", 4294967295.0, rkey); }
};

// Checks a request of `op` and builds its work request into `out` (not posted, not counted): the
// same checks in the same order whichever way its fields come (ValueFields, PackedFields). A
// refusal is thrown through `call`.
template <typename Fields>
bool BuildRequest(const Call& call, CmEpState& state, std::string_view op, const Fields& source, CmEpState::Built* out) {
  double id;
  if (!source.Id(call, &id)) return false;
  std::vector<ibv_sge>& sges = out->sges;
  CmPosted& entry = out->entry;
  bool plain = false;
  if (!source.SegmentsOf(call, state, &sges, &entry, &plain)) return false;
  if (plain && (op == "recv" || op == "read")) {
    return call.Invalid("a receive or a read lands in registered memory: plain bytes go only in an inline send or write"), false;
  }
  uint32_t max_sge = op == "recv" ? state.config.max_recv_sge : state.config.max_send_sge;
  if (sges.size() > max_sge) {
    return call.Invalid(std::to_string(sges.size()) + " segments: the queue pair takes at most " + std::to_string(max_sge) +
                        (op == "recv" ? " (maxRecvSge)" : " (maxSendSge)")),
           false;
  }
  entry.id = id;
  if (op == "recv" ? state.recvs_posted >= state.config.max_recv_wr : state.sends_posted >= state.config.max_send_wr) {
    return call.Fail(ENOMEM, op == "recv" ? "the receive queue is full (maxRecvWr " + std::to_string(state.config.max_recv_wr) +
                                                ") until a receive completes"
                                          : "the send queue is full (maxSendWr " + std::to_string(state.config.max_send_wr) +
                                                ") until a request completes"),
           false;
  }
  if (op != "recv" && state.phase != CmEpState::Phase::Established) {
    return call.Invalid("the endpoint is not connected: post sends, writes and reads once cmConnect or cmAccept succeeded"),
           false;
  }
  out->token = state.next_token++;
  if (op == "recv") {
    entry.recv = true;
    return true;
  }
  ibv_send_wr& wr = out->wr;
  wr = ibv_send_wr{};
  wr.wr_id = out->token;
  bool has_imm = false;
  double imm = 0;
  if (op == "read" && source.ImmPresent()) return call.Invalid("a read carries no immediate data"), false;
  if (!source.Imm(call, &has_imm, &imm)) return false;
  bool inline_data = false;
  if (!source.Inline(call, &inline_data)) return false;
  if (inline_data && op == "read") return call.Invalid("a read cannot be inline"), false;
  if (plain && !inline_data) return call.Invalid("plain bytes (a Uint8Array, not a region) go only inline: set inline"), false;
  if (!source.Signalled(call, &entry.signalled)) return false;
  if (op == "send") {
    wr.opcode = has_imm ? IBV_WR_SEND_WITH_IMM : IBV_WR_SEND;
  } else {
    uint64_t address = 0;
    double rkey;
    if (!source.RemoteAddress(call, &address) || !source.Rkey(call, &rkey)) return false;
    wr.opcode = op == "read" ? IBV_WR_RDMA_READ : has_imm ? IBV_WR_RDMA_WRITE_WITH_IMM : IBV_WR_RDMA_WRITE;
    wr.wr.rdma.remote_addr = address;
    wr.wr.rdma.rkey = static_cast<uint32_t>(rkey);
  }
  if (has_imm) wr.imm_data = htonl(static_cast<uint32_t>(imm));
  if (entry.signalled) wr.send_flags |= IBV_SEND_SIGNALED;
  if (inline_data) {
    std::size_t total = 0;
    for (const ibv_sge& sge : sges) total += sge.length;
    if (total > state.config.max_inline_data) {
      return call.Invalid(std::to_string(total) + " bytes cannot go inline: the queue pair takes at most " +
                          std::to_string(state.config.max_inline_data) + " (maxInlineData)"),
             false;
    }
    // The region is held until the post has copied the bytes (PostSends): cmPostWindow can run
    // JavaScript (a later request's refusal, made an Error) between building a request and posting it.
    wr.send_flags |= IBV_SEND_INLINE;
  }
  return true;
}

// Posts `count` built send-queue requests (counted already) in one ibv_post_send; those posted are
// entered in `posted`, the rest uncounted. Returns how many were posted; `*errnum` the refusal.
std::size_t PostSends(CmEpState& state, CmEpState::Built* built, std::size_t count, int* errnum) {
  for (std::size_t i = 0; i < count; i++) {
    built[i].wr.sg_list = built[i].sges.data();
    built[i].wr.num_sge = static_cast<int>(built[i].sges.size());
    built[i].wr.next = i + 1 < count ? &built[i + 1].wr : nullptr;
  }
  ibv_send_wr* bad = nullptr;
  *errnum = count == 0 ? 0 : state.has_qp ? ibv_post_send(state.id->qp, &built[0].wr, &bad) : EINVAL;
  // The refused request and those after it were not posted; `bad` points into `built`.
  std::size_t posted = *errnum == 0 ? count : 0;
  for (std::size_t i = 0; *errnum != 0 && i < count; i++) {
    if (&built[i].wr == bad) posted = i;
  }
  for (std::size_t i = 0; i < posted; i++) {
    // Copied into the work request by the post: neither the plain bytes nor an inline request's
    // region is read later.
    built[i].entry.hold.plain_bytes = {};
    if ((built[i].wr.send_flags & IBV_SEND_INLINE) != 0) built[i].entry.hold.regions.clear();
    state.posted.emplace(built[i].token, std::move(built[i].entry));
  }
  state.sends_posted -= count - posted;
  return posted;
}

// The same for built receives, in one ibv_post_recv.
std::size_t PostRecvs(CmEpState& state, CmEpState::Built* built, std::size_t count, int* errnum) {
  ibv_recv_wr few[16];
  std::vector<ibv_recv_wr> more;
  ibv_recv_wr* wrs = count <= 16 ? few : (more.resize(count), more.data());
  for (std::size_t i = 0; i < count; i++) {
    wrs[i] = ibv_recv_wr{};
    wrs[i].wr_id = built[i].token;
    wrs[i].sg_list = built[i].sges.data();
    wrs[i].num_sge = static_cast<int>(built[i].sges.size());
    wrs[i].next = i + 1 < count ? &wrs[i + 1] : nullptr;
  }
  ibv_recv_wr* bad = nullptr;
  *errnum = count == 0 ? 0 : state.has_qp ? ibv_post_recv(state.id->qp, wrs, &bad) : EINVAL;
  std::size_t posted = *errnum == 0 ? count : 0;
  for (std::size_t i = 0; *errnum != 0 && i < count; i++) {
    if (&wrs[i] == bad) posted = i;
  }
  for (std::size_t i = 0; i < posted; i++) state.posted.emplace(built[i].token, std::move(built[i].entry));
  state.recvs_posted -= count - posted;
  return posted;
}

// The device's refusal of a post: the same failure whichever call posted.
Napi::Value DeviceRefused(const Call& call, bool recv, int errnum) {
  return call.Fail(errnum, errnum == ENOMEM ? (recv ? "the receive queue is full" : "the send queue is full")
                                            : recv ? ""
                                                   : "the device refused the request");
}

// Posts one request of `op`, its fields read already: the same checks, in the same order, whichever
// way they were read.
Napi::Value PostRequest(Napi::Env env, CmEp* ep, Keys& keys, Napi::Value op_value, const Napi::Value (&fields)[kFields],
                        const Segments& from) {
  char op_text[16];
  std::string_view op = Word(op_value, op_text);
  Call call(env, OperationOf(op), Domain::Errno);
  if (!IsOp(op)) return call.Invalid(kOpRefused);
  CmEpState& state = *ep->state;
  if (!state.has_qp) return call.Invalid("the endpoint has no queue pair yet (its address is being resolved)");
  CmEpState::Built built{};
  if (!BuildRequest(call, state, op, ValueFields{fields, from, keys}, &built)) return env.Undefined();
  int errnum = 0;
  if (built.entry.recv) {
    state.recvs_posted++;
    if (PostRecvs(state, &built, 1, &errnum) == 0) return DeviceRefused(call, true, errnum);
    return env.Undefined();
  }
  state.sends_posted++;
  if (PostSends(state, &built, 1, &errnum) == 0) return DeviceRefused(call, false, errnum);
  return env.Undefined();
}

// cmPost(ep, request): one of core's CmWorkRequest; throws the refusal.
Napi::Value CmPost(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Call guard(env, "rdma_post_send", Domain::Errno);
  CmEp* ep = Opened<CmEp>(info[0]);
  if (ep == nullptr && (ep = Open<CmEp>(guard, info[0])) == nullptr) return env.Undefined();
  if (!info[1].IsObject()) return guard.Invalid("a work request must be an object");
  Napi::Object request = info[1].As<Napi::Object>();
  Keys keys = CallKeys(env);
  Napi::Value op = request.Get(keys[Key::Op]);
  char op_text[16];
  std::string_view op_word = Word(op, op_text);
  Call call(env, OperationOf(op_word), Domain::Errno);
  if (env.IsExceptionPending()) return call.Invalid("reading the request threw");
  if (!IsOp(op_word)) return call.Invalid(kOpRefused);
  Napi::Value id = request.Get(keys[Key::Id]);
  Napi::Value segments = request.Get(keys[Key::Segments]);
  const Napi::Value fields[kFields] = {id,
                                       request.Get(keys[Key::Imm]),
                                       request.Get(keys[Key::Inline]),
                                       request.Get(keys[Key::Completion]),
                                       request.Get(keys[Key::RemoteAddress]),
                                       request.Get(keys[Key::Rkey])};
  if (env.IsExceptionPending()) return call.Invalid("reading the request threw");
  return PostRequest(env, ep, keys, op, fields, Segments{segments, {}});
}

// cmPostOne(ep, op, id, mr, offset, length, imm, inline, completion, remoteAddress, rkey): a
// request of one segment, its fields read by the caller (JavaScript reads them through its inline
// caches, where each napi_get_property here takes a lookup of its own); the same checks as cmPost's.
Napi::Value CmPostOne(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Call guard(env, "rdma_post_send", Domain::Errno);
  CmEp* ep = Opened<CmEp>(info[0]);
  if (ep == nullptr && (ep = Open<CmEp>(guard, info[0])) == nullptr) return env.Undefined();
  Keys keys = CallKeys(env);
  const Napi::Value fields[kFields] = {info[2], info[6], info[7], info[8], info[9], info[10]};
  return PostRequest(env, ep, keys, info[1], fields, Segments{Napi::Value(), {info[3], info[4], info[5]}});
}

// cmPostWindow's numbers a request: op (0 send, 1 recv, 2 read, 3 write), id, the index of its
// region in `regions`, offset, length, flags (kFlagSignalled, kFlagInline, kFlagHasImm), imm, rkey; a read's
// or a write's remote address is in `remotes`, at the request's index.
constexpr std::size_t kWindowFields = 8;
enum WindowFlag : unsigned { kFlagSignalled = 1, kFlagInline = 2, kFlagHasImm = 4 };
constexpr const char* kWindowOps[4] = {"send", "recv", "read", "write"};

// cmPostWindow's regions: each handle opened (and its endpoint checked, by SegmentOn) when a
// request first names it; a refusal is its request's.
struct WindowRegions {
  std::vector<Napi::Value> values;
  std::vector<CmMr*> opened;
};

// A request's fields as cmPostWindow's numbers (`at`, kWindowFields of them), checked as
// ValueFields checks the values they stand for; `remote` is its remote address, when given.
struct PackedFields {
  const double* at;
  WindowRegions& regions;
  const uint64_t* remote;

  unsigned Flags() const { return static_cast<unsigned>(at[5]); }
  bool Id(const Call& call, double* id) const {
    double flags;
    if (!Integer(call, at[5], "flags", 7, &flags)) return false;
    *id = at[1];
    return true;
  }
  bool SegmentsOf(const Call& call, CmEpState& state, std::vector<ibv_sge>* sges, CmPosted* entry, bool* plain) const {
    *plain = false;
    double index;
    if (!Integer(call, at[2], "region index", static_cast<double>(regions.values.size()) - 1, &index)) return false;
    auto i = static_cast<std::size_t>(index);
    CmMr*& mr = regions.opened[i];
    if (mr == nullptr && (mr = Open<CmMr>(call, regions.values[i])) == nullptr) return false;
    return SegmentOn(call, state, 0, mr, at[3], at[4], sges, entry);
  }
  bool ImmPresent() const { return (Flags() & kFlagHasImm) != 0; }
  bool Imm(const Call& call, bool* has, double* imm) const {
    *has = ImmPresent();
    return !*has || Integer(call, at[6], "imm", 4294967295.0, imm);
  }
  bool Inline(const Call&, bool* inline_data) const {
    *inline_data = (Flags() & kFlagInline) != 0;
    return true;
  }
  bool Signalled(const Call&, bool* signalled) const {
    *signalled = (Flags() & kFlagSignalled) != 0;
    return true;
  }
  bool RemoteAddress(const Call& call, uint64_t* address) const {
    if (remote == nullptr) return call.Invalid("remoteAddress must be a bigint from 0 to 2^64 - 1"), false;
    *address = *remote;
    return true;
  }
  bool Rkey(const Call& call, double* rkey) const { return Integer(call, at[7], "rkey", 4294967295.0, rkey); }
};

// cmPostWindow(ep, regions, fields, count, remotes?): `count` requests of one segment on regions
// (kWindowFields numbers each in the Float64Array `fields`, `regions` the handles they name by
// index, `remotes` a BigUint64Array of the reads' and writes' remote addresses), in one call: each
// checked as cmPostOne checks it, in order; each run of send-queue requests in one ibv_post_send,
// each run of receives in one ibv_post_recv. Returns how many were posted; the first refusal ends
// the window (those before it are posted, none after) and is thrown with `posted` set to their count.
Napi::Value CmPostWindow(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Call guard(env, "rdma_post_send", Domain::Errno);
  // Every handle read before any typed array's bytes are taken: a getter on a hostile array cannot
  // run after that (it could detach the bytes).
  if (!info[1].IsArray()) return guard.Invalid("regions must be an array of region handles");
  Napi::Array list = info[1].As<Napi::Array>();
  WindowRegions regions;
  uint32_t region_count = list.Length();
  if (region_count > 4096) return guard.Invalid("a window names at most 4096 regions");
  regions.values.reserve(region_count);
  for (uint32_t i = 0; i < region_count; i++) {
    regions.values.push_back(list.Get(i));
    if (env.IsExceptionPending()) return guard.Invalid("reading the regions threw");
  }
  regions.opened.assign(region_count, nullptr);
  napi_typedarray_type type = napi_uint8_array;
  std::size_t length = 0;
  void* data = nullptr;
  if (napi_get_typedarray_info(env, info[2], &type, &length, &data, nullptr, nullptr) != napi_ok || type != napi_float64_array) {
    return guard.Invalid("the requests' fields must be a Float64Array");
  }
  double count_value;
  if (!info[3].IsNumber()) return guard.Invalid("count must be a number");
  if (!Integer(guard, info[3].As<Napi::Number>().DoubleValue(), "count", static_cast<double>(length / kWindowFields),
               &count_value)) {
    return env.Undefined();
  }
  auto count = static_cast<std::size_t>(count_value);
  const uint64_t* remotes = nullptr;
  std::size_t remote_count = 0;
  if (!info[4].IsUndefined()) {
    void* remote_data = nullptr;
    if (napi_get_typedarray_info(env, info[4], &type, &remote_count, &remote_data, nullptr, nullptr) != napi_ok ||
        type != napi_biguint64_array) {
      return guard.Invalid("the remote addresses must be a BigUint64Array");
    }
    remotes = static_cast<const uint64_t*>(remote_data);
  }
  CmEp* ep = Opened<CmEp>(info[0]);
  if (ep == nullptr && (ep = Open<CmEp>(guard, info[0])) == nullptr) return env.Undefined();
  CmEpState& state = *ep->state;
  const auto* fields = static_cast<const double*>(data);
  std::vector<CmEpState::Built> built;
  built.reserve(std::min<std::size_t>(count, std::size_t{state.config.max_send_wr} + state.config.max_recv_wr + 1));
  // Built and counted in order up to the first refusal, which is taken (cleared) until the runs
  // before it are posted.
  napi_value refusal = nullptr;
  for (std::size_t i = 0; i < count; i++) {
    // Copied first: each number is read once, whatever another thread does to a shared buffer.
    double at[kWindowFields];
    std::copy_n(fields + i * kWindowFields, kWindowFields, at);
    double op_index = at[0];
    std::string_view op = op_index == 0 ? kWindowOps[0] : op_index == 1 ? kWindowOps[1] : op_index == 2 ? kWindowOps[2]
                                        : op_index == 3                 ? kWindowOps[3]
                                                                        : std::string_view();
    Call call(env, OperationOf(op), Domain::Errno);
    CmEpState::Built request{};
    bool ok = !op.empty() || (call.Invalid(kOpRefused), false);
    ok = ok && (state.has_qp || (call.Invalid("the endpoint has no queue pair yet (its address is being resolved)"), false));
    ok = ok && BuildRequest(call, state, op, PackedFields{at, regions, i < remote_count ? remotes + i : nullptr}, &request);
    if (!ok) {
      napi_get_and_clear_last_exception(env, &refusal);
      // Making the refusal ran JavaScript (a setter on Object.prototype sees an Error's properties
      // set), which may have destroyed the endpoint: its counts are zeroed, nothing is posted.
      if (!state.has_qp) built.clear();
      break;
    }
    (request.entry.recv ? state.recvs_posted : state.sends_posted)++;
    built.push_back(std::move(request));
  }
  // Each run of one queue's requests in one post, in order; after a refusal, the rest uncounted.
  std::size_t posted = 0;
  for (std::size_t start = 0; start < built.size();) {
    bool recv = built[start].entry.recv;
    std::size_t end = start;
    while (end < built.size() && built[end].entry.recv == recv) end++;
    int errnum = 0;
    std::size_t run = recv ? PostRecvs(state, &built[start], end - start, &errnum)
                           : PostSends(state, &built[start], end - start, &errnum);
    posted += run;
    if (errnum != 0) {
      for (std::size_t i = end; i < built.size(); i++) (built[i].entry.recv ? state.recvs_posted : state.sends_posted)--;
      ibv_wr_opcode opcode = built[posted].wr.opcode;
      Call call(env,
                recv                                ? "rdma_post_recv"
                : opcode == IBV_WR_RDMA_READ        ? "rdma_post_read"
                : opcode == IBV_WR_SEND_WITH_IMM || opcode == IBV_WR_SEND ? "rdma_post_send"
                                                    : "rdma_post_write",
                Domain::Errno);
      DeviceRefused(call, recv, errnum);
      SetPosted(env, posted);
      return env.Undefined();
    }
    start = end;
  }
  if (refusal == nullptr) return Napi::Number::New(env, static_cast<double>(posted));
  napi_throw(env, refusal);
  SetPosted(env, posted);
  return env.Undefined();
}

// cmPollPacked(ep, into): ibv_poll_cq on both CQs, without waiting, into a Float64Array,
// kCompletionFields numbers a completion (no object made per completion: JavaScript makes them,
// through its inline caches); returns how many. A full array may leave completions in the CQs:
// the caller polls again.
Napi::Value CmPollPacked(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Call call(env, "ibv_poll_cq", Domain::Errno);
  CmEp* ep = Opened<CmEp>(info[0]);
  if (ep == nullptr && (ep = Open<CmEp>(call, info[0])) == nullptr) return env.Undefined();
  double* into = nullptr;
  uint32_t capacity = 0;
  if (!conn::CompletionRows(call, info[1], CmEpState::kCompletionFields, &into, &capacity)) return env.Undefined();
  uint32_t count = 0;
  int errnum = ep->state->DrainPacked(into, capacity, &count);
  if (errnum != 0 && count == 0) return call.Fail(errnum);
  return Napi::Number::New(env, count);
}

// cmWaitCompletions(ep, callback): returns the wait's id for cmCancel.
Napi::Value CmWaitCompletions(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Call call(env, "ibv_get_cq_event", Domain::Errno);
  CmEp* ep = Open<CmEp>(call, info[0]);
  if (ep == nullptr || !conn::IsCallback(call, info[1])) return env.Undefined();
  CmEpState& state = *ep->state;
  if (!state.has_qp) return call.Invalid("the endpoint has no queue pair yet (its address is being resolved)");
  return conn::StartWait(call, state.completions, state.comp_channel->fd, info[1]);
}

// cmWaitPacked(ep, into, callback): cmWaitCompletions', the completions drained into `into` as
// cmPollPacked does and the callback told how many (at least one; a full array may leave more).
Napi::Value CmWaitPacked(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Call call(env, "ibv_get_cq_event", Domain::Errno);
  CmEp* ep = Open<CmEp>(call, info[0]);
  double* into = nullptr;
  uint32_t capacity = 0;
  if (ep == nullptr || !conn::CompletionRows(call, info[1], CmEpState::kCompletionFields, &into, &capacity) ||
      !conn::IsCallback(call, info[2])) {
    return env.Undefined();
  }
  CmEpState& state = *ep->state;
  if (!state.has_qp) return call.Invalid("the endpoint has no queue pair yet (its address is being resolved)");
  Napi::Value id = conn::StartWait(call, state.completions, state.comp_channel->fd, info[2]);
  if (id.IsNumber()) state.completions.waiters.back().into = Napi::Persistent(info[1]);
  return id;
}

}  // namespace

void RegisterCmEpPost(Napi::Env env, Napi::Object exports) {
  exports.Set("cmPost", Napi::Function::New(env, CmPost, "cmPost"));
  exports.Set("cmPostOne", Napi::Function::New(env, CmPostOne, "cmPostOne"));
  exports.Set("cmPostWindow", Napi::Function::New(env, CmPostWindow, "cmPostWindow"));
  exports.Set("cmPollPacked", Napi::Function::New(env, CmPollPacked, "cmPollPacked"));
  exports.Set("cmWaitCompletions", Napi::Function::New(env, CmWaitCompletions, "cmWaitCompletions"));
  exports.Set("cmWaitPacked", Napi::Function::New(env, CmWaitPacked, "cmWaitPacked"));
}

}  // namespace rdma
