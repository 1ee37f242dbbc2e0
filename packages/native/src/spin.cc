// Busy-polling a completion queue for a bounded time: what core's polling mode asks before it arms
// the completion channel and yields to the event loop (a completion that arrives within the budget
// costs no trip through the channel, epoll and the loop). The budget is in nanoseconds on the
// monotonic clock, at most kMaxSpinNs: it bounds how long one call holds the event loop.
//
//   spinCompletions(queue, budgetNs): pollCompletions' answer, spinning until it is not empty or
//     the budget has run out (then: none).
//   spinPacked(queue, into, budgetNs): pollPacked's, the same way.
//   cmSpinPacked(ep, into, budgetNs): cmPollPacked's, the same way.
#include <napi.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <string>

#include "cm_ep.h"
#include "completions.h"
#include "conn_common.h"
#include "errors.h"
#include "handles.h"

namespace rdma {

namespace {

using Clock = SpinClock;

// 10 ms: a longer spin would hold the event loop past what any timer or socket tolerates.
constexpr double kMaxSpinNs = 10'000'000;

// The budget as a deadline, or false after the refusal (what was wrong and what to pass).
bool ReadDeadline(const Call& call, Napi::Value value, Clock::time_point* deadline) {
  double ns = value.IsNumber() ? value.As<Napi::Number>().DoubleValue() : -1;
  if (!std::isfinite(ns) || ns < 0 || ns > kMaxSpinNs || std::floor(ns) != ns) {
    call.Invalid("the spin budget must be a whole number of nanoseconds from 0 to 10000000 (10 ms)");
    return false;
  }
  *deadline = Clock::now() + std::chrono::nanoseconds(static_cast<int64_t>(ns));
  return true;
}

Napi::Value SpinCompletions(const Napi::CallbackInfo& info) {
  return DrainCall(info, false, [&](const Call& call, Clock::time_point* deadline) { return ReadDeadline(call, info[1], deadline); });
}

Napi::Value SpinPacked(const Napi::CallbackInfo& info) {
  return DrainCall(info, true, [&](const Call& call, Clock::time_point* deadline) { return ReadDeadline(call, info[2], deadline); });
}

Napi::Value CmSpinPacked(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Call call(env, "ibv_poll_cq", Domain::Errno);
  CmEp* ep = Open<CmEp>(call, info[0]);
  if (ep == nullptr) return env.Undefined();
  double* into = nullptr;
  uint32_t capacity = 0;
  if (!conn::CompletionRows(call, info[1], CmEpState::kCompletionFields, &into, &capacity)) return env.Undefined();
  Clock::time_point deadline;
  if (!ReadDeadline(call, info[2], &deadline)) return env.Undefined();
  uint32_t count = 0;
  int errnum = 0;
  do {
    errnum = ep->state->DrainPacked(into, capacity, &count);
  } while (errnum == 0 && count == 0 && Clock::now() < deadline);
  if (errnum != 0 && count == 0) return call.Fail(errnum);
  return Napi::Number::New(env, count);
}

}  // namespace

void RegisterSpin(Napi::Env env, Napi::Object exports) {
  exports.Set("spinCompletions", Napi::Function::New(env, SpinCompletions, "spinCompletions"));
  exports.Set("spinPacked", Napi::Function::New(env, SpinPacked, "spinPacked"));
  exports.Set("cmSpinPacked", Napi::Function::New(env, CmSpinPacked, "cmSpinPacked"));
}

}  // namespace rdma
