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
    Napi::Object completion = Napi::Object::New(env);
    completion.Set(keys[Key::Id], Napi::Number::New(env, request.id));
    completion.Set(keys[Key::Status], Napi::Number::New(env, f.status));
    completion.Set(keys[Key::ByteLength], Napi::Number::New(env, f.byte_length));
    completion.Set(keys[Key::Opcode], Napi::Number::New(env, f.opcode));
    completion.Set(keys[Key::Flags], Napi::Number::New(env, static_cast<double>(f.flags)));
    if (f.has_imm) completion.Set(keys[Key::Imm], Napi::Number::New(env, f.imm));
    out.Set(*count, completion);
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
    // Takes every event on the channel (either CQ's), acknowledging each and re-arming its CQ;
    // only then drains both, so that a completion arriving after the drain raises a new event.
    int errnum = 0;
    const char* operation = "ibv_get_cq_event";
    bool any = false;
    for (;;) {
      ibv_cq* cq = nullptr;
      void* context = nullptr;
      errno = 0;
      if (ibv_get_cq_event(comp_channel, &cq, &context) != 0) {
        int failed = errno != 0 ? errno : EIO;
        if (failed != EAGAIN && failed != EWOULDBLOCK) errnum = failed;
        break;
      }
      any = true;
      ibv_ack_cq_events(cq, 1);
      if ((errnum = ibv_req_notify_cq(cq, 0)) != 0) {
        operation = "ibv_req_notify_cq";
        break;
      }
    }
    if (errnum == 0 && !any) break;  // nothing more on the channel: wait on
    Napi::Array out = Napi::Array::New(env);
    uint32_t count = 0;
    if (errnum == 0) {
      operation = "ibv_poll_cq";
      errnum = Drain(env, out, &count);
      if (errnum == 0 && count == 0) continue;  // already taken by an earlier poll: wait on
    }
    Waiter waiter = std::move(completions.waiters.front());
    completions.waiters.pop_front();
    waiting--;
    if (count != 0) {
      Deliver(env, waiter, nullptr, out, true);
    } else {
      Deliver(env, waiter, ErrnoValue(env, errnum, operation, ""), nullptr, true);
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

// Segment `i` of a request (its `mr`, `offset` and `length`) as a scatter/gather entry on a region
// of `ep`, the region into `entry`; or plain bytes (copied into `entry`) (`*plain` set), which only an inline send or
// write may carry (PostRequest checks).
bool ReadSegment(const Call& call, CmEpState& ep, uint32_t i, Napi::Value mr_value, Napi::Value offset_value,
                 Napi::Value length_value, std::vector<ibv_sge>* sges, CmPosted* entry, bool* plain) {
  if (mr_value.IsTypedArray()) {
    *plain = true;
    return ReadPlainBytes(call, ep, i, mr_value, offset_value, length_value, sges, entry);
  }
  CmMr* mr = Open<CmMr>(call, mr_value);
  if (mr == nullptr) return false;
  if (mr->state->ep.get() != &ep) {
    return call.Invalid("segment " + std::to_string(i) +
                        "'s region is registered on another endpoint's protection domain: register it on this one"),
           false;
  }
  double offset, length;
  if (!Integer(call, offset_value, "offset", kMaxSafe, &offset) || !Integer(call, length_value, "length", kMaxLength, &length)) {
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

// Posts one request of `op`, its fields read already: the same checks, in the same order, whichever
// way they were read.
Napi::Value PostRequest(Napi::Env env, CmEp* ep, Keys& keys, Napi::Value op_value, const Napi::Value (&fields)[kFields],
                        const Segments& from, bool chained = false) {
  char op_text[16];
  std::string_view op = Word(op_value, op_text);
  Call call(env, OperationOf(op), Domain::Errno);
  if (!IsOp(op)) return call.Invalid(kOpRefused);
  CmEpState& state = *ep->state;
  if (!state.has_qp) return call.Invalid("the endpoint has no queue pair yet (its address is being resolved)");
  if (!fields[kId].IsNumber()) return call.Invalid("id must be a number");
  double id = fields[kId].As<Napi::Number>().DoubleValue();
  std::vector<ibv_sge> sges;
  CmPosted entry;
  bool plain = false;
  bool read = from.list.IsEmpty()
                  ? ReadSegment(call, state, 0, from.one[0], from.one[1], from.one[2], &sges, &entry, &plain)
                  : ReadSegments(call, keys, state, from.list, &sges, &entry, &plain);
  if (!read) return env.Undefined();
  if (plain && (op == "recv" || op == "read")) {
    return call.Invalid("a receive or a read lands in registered memory: plain bytes go only in an inline send or write");
  }
  uint32_t max_sge = op == "recv" ? state.config.max_recv_sge : state.config.max_send_sge;
  if (sges.size() > max_sge) {
    return call.Invalid(std::to_string(sges.size()) + " segments: the queue pair takes at most " + std::to_string(max_sge) +
                        (op == "recv" ? " (maxRecvSge)" : " (maxSendSge)"));
  }
  entry.id = id;
  if (op == "recv" ? state.recvs_posted >= state.config.max_recv_wr : state.sends_posted >= state.config.max_send_wr) {
    return call.Fail(ENOMEM, op == "recv" ? "the receive queue is full (maxRecvWr " + std::to_string(state.config.max_recv_wr) +
                                                ") until a receive completes"
                                          : "the send queue is full (maxSendWr " + std::to_string(state.config.max_send_wr) +
                                                ") until a request completes");
  }
  if (chained && op == "recv") return call.Invalid("a receive cannot be chained: post it alone");
  if (op != "recv" && state.phase != CmEpState::Phase::Established) {
    return call.Invalid("the endpoint is not connected: post sends, writes and reads once cmConnect or cmAccept succeeded");
  }
  uint64_t token = state.next_token++;
  if (op == "recv") {
    ibv_recv_wr wr{};
    ibv_recv_wr* bad = nullptr;
    wr.wr_id = token;
    wr.sg_list = sges.data();
    wr.num_sge = static_cast<int>(sges.size());
    entry.recv = true;
    int errnum = ibv_post_recv(state.id->qp, &wr, &bad);
    if (errnum != 0) return call.Fail(errnum, errnum == ENOMEM ? "the receive queue is full" : "");
    state.posted.emplace(token, std::move(entry));
    state.recvs_posted++;
    return env.Undefined();
  }
  ibv_send_wr wr{};
  ibv_send_wr* bad = nullptr;
  wr.wr_id = token;
  wr.sg_list = sges.data();
  wr.num_sge = static_cast<int>(sges.size());
  bool has_imm = !fields[kImm].IsUndefined();
  double imm = 0;
  if (has_imm && (op == "read" || !Integer(call, fields[kImm], "imm", 4294967295.0, &imm))) {
    return op == "read" ? call.Invalid("a read carries no immediate data") : env.Undefined();
  }
  if (!fields[kInline].IsUndefined() && !fields[kInline].IsBoolean()) return call.Invalid("inline must be a boolean");
  bool inline_data = fields[kInline].IsBoolean() && fields[kInline].As<Napi::Boolean>().Value();
  if (inline_data && op == "read") return call.Invalid("a read cannot be inline");
  if (plain && !inline_data) return call.Invalid("plain bytes (a Uint8Array, not a region) go only inline: set inline");
  char signal_text[16];
  std::string_view signal = Word(fields[kCompletion], signal_text);
  if (!fields[kCompletion].IsUndefined() && signal != "always" && signal != "onError") {
    return call.Invalid("completion must be \"always\" or \"onError\"");
  }
  entry.signalled = signal != "onError";
  if (op == "send") {
    wr.opcode = has_imm ? IBV_WR_SEND_WITH_IMM : IBV_WR_SEND;
  } else {
    bool lossless = false;
    uint64_t address = fields[kRemoteAddress].IsBigInt() ? fields[kRemoteAddress].As<Napi::BigInt>().Uint64Value(&lossless) : 0;
    if (!lossless) return call.Invalid("remoteAddress must be a bigint from 0 to 2^64 - 1");
    double rkey;
    if (!Integer(call, fields[kRkey], "rkey", 4294967295.0, &rkey)) return env.Undefined();
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
                          std::to_string(state.config.max_inline_data) + " (maxInlineData)");
    }
    wr.send_flags |= IBV_SEND_INLINE;
    entry.hold.regions.clear();  // the bytes are copied now: the region is not read later
  }
  if (chained) {
    // Posted by cmPostChain with the others: counted now, so that the queue's bound holds.
    state.chain.push_back(CmEpState::Chained{wr, std::move(sges), token, std::move(entry)});
    state.sends_posted++;
    return env.Undefined();
  }
  int errnum = ibv_post_send(state.id->qp, &wr, &bad);
  if (errnum != 0) {
    return call.Fail(errnum, errnum == ENOMEM ? "the send queue is full" : "the device refused the request");
  }
  entry.hold.plain_bytes = {};  // copied into the work request by the post
  state.posted.emplace(token, std::move(entry));
  state.sends_posted++;
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

// cmPostOne(ep, op, id, mr, offset, length, imm, inline, completion, remoteAddress, rkey, chain): a
// request of one segment, its fields read by the caller (JavaScript reads them through its inline
// caches, where each napi_get_property here takes a lookup of its own); the same checks as cmPost's.
// `chain` true: a send-queue request is checked and built but not posted: cmPostChain posts it.
Napi::Value CmPostOne(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Call guard(env, "rdma_post_send", Domain::Errno);
  CmEp* ep = Opened<CmEp>(info[0]);
  if (ep == nullptr && (ep = Open<CmEp>(guard, info[0])) == nullptr) return env.Undefined();
  Keys keys = CallKeys(env);
  const Napi::Value fields[kFields] = {info[2], info[6], info[7], info[8], info[9], info[10]};
  bool chained = info[11].IsBoolean() && info[11].As<Napi::Boolean>().Value();
  return PostRequest(env, ep, keys, info[1], fields, Segments{Napi::Value(), {info[3], info[4], info[5]}}, chained);
}

// cmPostChain(ep): the send-queue requests cmPostOne chained, in one ibv_post_send (one doorbell,
// one system call on Soft-RoCE, where each would take its own). Returns how many were posted; when
// the device refuses one, those before it are posted, it and those after are not, and the refusal
// is thrown with `posted` set to their count.
Napi::Value CmPostChain(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Call call(env, "rdma_post_send", Domain::Errno);
  CmEp* ep = Open<CmEp>(call, info[0]);
  if (ep == nullptr) return env.Undefined();
  CmEpState& state = *ep->state;
  std::vector<CmEpState::Chained> chain = std::move(state.chain);
  state.chain.clear();
  std::size_t count = chain.size();
  if (count == 0) return Napi::Number::New(env, 0);
  for (std::size_t i = 0; i < count; i++) {
    chain[i].wr.sg_list = chain[i].sges.data();
    chain[i].wr.next = i + 1 < count ? &chain[i + 1].wr : nullptr;
  }
  ibv_send_wr* bad = nullptr;
  int errnum = state.has_qp ? ibv_post_send(state.id->qp, &chain[0].wr, &bad) : EINVAL;
  // The refused request and those after it were not posted; `bad` points into `chain`.
  std::size_t posted = errnum == 0 ? count : 0;
  for (std::size_t i = 0; errnum != 0 && i < count; i++) {
    if (&chain[i].wr == bad) posted = i;
  }
  for (std::size_t i = 0; i < posted; i++) {
    chain[i].entry.hold.plain_bytes = {};  // copied into the work request by the post
    state.posted.emplace(chain[i].token, std::move(chain[i].entry));
  }
  state.sends_posted -= count - posted;
  if (errnum == 0) return Napi::Number::New(env, static_cast<double>(count));
  call.Fail(errnum, errnum == ENOMEM ? "the send queue is full" : "the device refused the request");
  bool pending = false;
  if (napi_is_exception_pending(env, &pending) == napi_ok && pending) {
    napi_value thrown = nullptr;
    napi_get_and_clear_last_exception(env, &thrown);
    Napi::Object(env, thrown).Set("posted", Napi::Number::New(env, static_cast<double>(posted)));
    napi_throw(env, thrown);
  }
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
  // One call reads the array's kind, length and bytes (it refuses anything but a typed array).
  napi_typedarray_type type = napi_uint8_array;
  std::size_t length = 0;
  void* data = nullptr;
  if (napi_get_typedarray_info(env, info[1], &type, &length, &data, nullptr, nullptr) != napi_ok || type != napi_float64_array) {
    return call.Invalid("the completions' array must be a Float64Array");
  }
  auto capacity = static_cast<uint32_t>(std::min<std::size_t>(length / CmEpState::kCompletionFields, UINT32_MAX));
  if (capacity == 0 || data == nullptr) return call.Invalid("the completions' array must hold at least one completion (6 numbers)");
  uint32_t count = 0;
  int errnum = ep->state->DrainPacked(static_cast<double*>(data), capacity, &count);
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

}  // namespace

void RegisterCmEpPost(Napi::Env env, Napi::Object exports) {
  exports.Set("cmPost", Napi::Function::New(env, CmPost, "cmPost"));
  exports.Set("cmPostOne", Napi::Function::New(env, CmPostOne, "cmPostOne"));
  exports.Set("cmPostChain", Napi::Function::New(env, CmPostChain, "cmPostChain"));
  exports.Set("cmPollPacked", Napi::Function::New(env, CmPollPacked, "cmPollPacked"));
  exports.Set("cmWaitCompletions", Napi::Function::New(env, CmWaitCompletions, "cmWaitCompletions"));
}

}  // namespace rdma
