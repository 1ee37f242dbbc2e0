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

  // A library code (RPMA_E_* or an errno, following the domain).
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

// librpma logs why a call failed but returns only a code. The capture keeps, per thread, the
// messages logged since the last Clear(); the functions run on the thread that called librpma.
void InstallLogCapture();
void ClearLog();
std::string TakeLog();

// If `size` bytes cannot be pinned under RLIMIT_MEMLOCK, says so and how to raise the limit;
// otherwise returns "".
std::string MemlockHint(std::size_t size);

// "a; b" without empty parts.
std::string Join(const std::string& a, const std::string& b);

}  // namespace rdma
