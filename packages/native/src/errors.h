// Failures leave the addon as JS Errors that carry the library's own number, never a message to
// parse: `code` (a negative RPMA_E_* value) for librpma calls, `errno` for librdmacm and verbs
// calls, plus `operation` and an optional `detail`. The TypeScript driver maps them with core's
// fromRpmaCode / fromErrno, the one mapping from codes to tagged errors.
#pragma once

#include <napi.h>

#include <cstddef>
#include <string>

namespace rdma {

// Which library's currency a call reports in.
enum class Domain { Rpma, Errno };

Napi::Error MakeError(Napi::Env env, Domain domain, int code, const char* operation, const std::string& detail);

// One native call: its name and where its failures go. Every exported function builds one and
// returns `call.Fail(...)` (which throws and yields undefined) on the way out.
class Call {
 public:
  Call(Napi::Env env, const char* operation, Domain domain) : env_(env), operation_(operation), domain_(domain) {}

  Napi::Env Env() const { return env_; }
  const char* Operation() const { return operation_; }
  Domain GetDomain() const { return domain_; }

  // A library code (RPMA_E_* or an errno, following the domain). If JavaScript threw while the
  // arguments were read (a getter, a Proxy trap), that exception is taken, becomes the `cause`, and
  // the call fails with the code as usual: one pending exception at a time, never a second throw.
  Napi::Value Fail(int code, const std::string& detail = {}) const;
  // What C would call a bad argument: RPMA_E_INVAL or EINVAL.
  Napi::Value Invalid(const std::string& detail) const;
  // A release refused because something still uses the handle, which stays alive: RPMA_E_INVAL or
  // EBUSY, marked `inUse` so that the driver can tell it from a failure after which it is gone.
  Napi::Value InUse(const std::string& detail) const;

 private:
  Napi::Env env_;
  const char* operation_;
  Domain domain_;
};

// A call that posts a list refused one of it: sets `posted` (how many before it were posted) on
// the pending exception, the refusal, which stays thrown. Does nothing when none is pending.
void SetPosted(Napi::Env env, std::size_t posted);
// `value` as an own, writable, enumerable, configurable property `key` of `object`, defined: no
// setter runs (an assignment would run one on its prototype chain).
void Own(Napi::Object object, const char* key, Napi::Value value);
// Throws `error`, unless an exception is pending already (that one stands) or it is empty.
void Throw(const Napi::Error& error);

// Whether JavaScript can run in `env`: false while the environment is torn down (a worker
// terminated, process.exit), when completions of async work and libuv callbacks still arrive but
// every call into JavaScript is refused. node-addon-api turns such a refusal into a fatal error, so
// every path that would build values for JavaScript from outside a JavaScript call asks first.
bool CanRunJs(napi_env env);

// A promise settled later, or none when JavaScript cannot run. node-addon-api's Deferred keeps an
// uninitialised promise when napi_create_promise is refused (during a worker's teardown), and
// returning that to JavaScript crashes.
class Settler {
 public:
  explicit Settler(napi_env env) : env_(env) { ok_ = napi_create_promise(env, &deferred_, &promise_) == napi_ok; }
  // The promise, or an empty value (returned to JavaScript as undefined) if there is none.
  Napi::Value Promise() const { return ok_ ? Napi::Value(env_, promise_) : Napi::Value(); }
  void Resolve(napi_value value) { Settle(value, true); }
  void Reject(napi_value error) { Settle(error, false); }

 private:
  void Settle(napi_value value, bool resolve) {
    if (!ok_ || deferred_ == nullptr || value == nullptr) return;
    if (resolve) napi_resolve_deferred(env_, deferred_, value);
    else napi_reject_deferred(env_, deferred_, value);
    deferred_ = nullptr;
  }
  napi_env env_;
  napi_deferred deferred_ = nullptr;
  napi_value promise_ = nullptr;
  bool ok_ = false;
};

// A promise already rejected with `error`, or an empty value when JavaScript cannot run.
Napi::Value Rejected(napi_env env, napi_value error);

// librpma logs why a call failed but returns only a code. The capture keeps, per thread, the
// messages logged since the last Clear(); the functions run on the thread that called librpma.
void InstallLogCapture();
void ClearLog();
std::string TakeLog();

// If `size` bytes cannot be pinned under RLIMIT_MEMLOCK, says so and how to raise the limit;
// otherwise returns "".
std::string MemlockHint(std::size_t size);
// After a registration failed with ENOMEM (or librpma logged "Cannot allocate memory"): the
// single-size hint if it applies, else that registrations together passed RLIMIT_MEMLOCK.
std::string MemlockHintAfterEnomem(std::size_t size);

// "a; b" without empty parts.
std::string Join(const std::string& a, const std::string& b);

}  // namespace rdma
