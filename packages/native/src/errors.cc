#include "errors.h"

#include <librpma.h>
#include <sys/resource.h>

#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <mutex>

namespace rdma {

void SetPosted(Napi::Env env, std::size_t posted) {
  bool pending = false;
  if (napi_is_exception_pending(env, &pending) != napi_ok || !pending) return;
  napi_value thrown = nullptr;
  napi_get_and_clear_last_exception(env, &thrown);
  Napi::Value value(env, thrown);
  if (value.IsObject()) Own(value.As<Napi::Object>(), "posted", Napi::Number::New(env, static_cast<double>(posted)));
  napi_throw(env, thrown);
}

void Own(Napi::Object object, const char* key, Napi::Value value) {
  napi_property_descriptor property{};
  property.utf8name = key;
  property.value = value;
  property.attributes = static_cast<napi_property_attributes>(napi_writable | napi_enumerable | napi_configurable);
  napi_define_properties(object.Env(), object, 1, &property);
}

void Throw(const Napi::Error& error) {
  // node-addon-api's ThrowAsJavaScriptException aborts the process when an exception is pending
  // (one JavaScript threw while the error was made, or an exhausted stack): that one stands.
  bool pending = false;
  if (error.IsEmpty() || napi_is_exception_pending(error.Env(), &pending) != napi_ok || pending) return;
  napi_throw(error.Env(), error.Value());
}

Napi::Error MakeError(Napi::Env env, Domain domain, int code, const char* operation, const std::string& detail) {
  std::string message = std::string(operation) + ": " +
                        (domain == Domain::Rpma ? rpma_err_2str(code) : std::strerror(code));
  if (!detail.empty()) message += ": " + detail;
  Napi::Error error = Napi::Error::New(env, message);
  if (error.IsEmpty()) return error;
  // Own properties, defined: assigned, they would run a setter on Object.prototype (JavaScript, in
  // the middle of a call that has checked its handles already).
  Own(error.Value(), "operation", Napi::String::New(env, operation));
  Own(error.Value(), domain == Domain::Rpma ? "code" : "errno", Napi::Number::New(env, code));
  if (!detail.empty()) Own(error.Value(), "detail", Napi::String::New(env, detail));
  return error;
}

Napi::Value Call::Fail(int code, const std::string& detail) const {
  // Throwing while an exception is pending is fatal in node-addon-api: take it first.
  napi_value thrown = nullptr;
  bool pending = false;
  if (napi_is_exception_pending(env_, &pending) == napi_ok && pending) {
    napi_get_and_clear_last_exception(env_, &thrown);
  }
  if (!CanRunJs(env_)) return Napi::Value();
  std::string full =
      thrown != nullptr ? Join(detail, "JavaScript threw while the arguments were read (see cause)") : detail;
  Napi::Error error = MakeError(env_, domain_, code, operation_, full);
  if (thrown != nullptr && !error.IsEmpty()) Own(error.Value(), "cause", Napi::Value(env_, thrown));
  Throw(error);
  return env_.Undefined();
}

Napi::Value Rejected(napi_env env, napi_value error) {
  Settler settler(env);
  settler.Reject(error);
  return settler.Promise();
}

bool CanRunJs(napi_env env) {
  // napi_coerce_to_bool opens with the preamble that refuses a call (napi_pending_exception with
  // none pending, or napi_cannot_run_js) once the environment can no longer run JavaScript; on a
  // boolean it runs none and makes nothing. (A property set on a fresh object, the probe before,
  // made an object and a string twice per wake-up: 5% of a ping-pong's CPU on the device.)
  napi_value value = nullptr;
  napi_value result = nullptr;
  if (napi_get_boolean(env, true, &value) != napi_ok) return false;
  napi_status status = napi_coerce_to_bool(env, value, &result);
  if (status == napi_ok) return true;
  bool pending = false;
  return napi_is_exception_pending(env, &pending) == napi_ok && pending;
}

Napi::Value Call::Invalid(const std::string& detail) const {
  return Fail(domain_ == Domain::Rpma ? RPMA_E_INVAL : EINVAL, detail);
}

Napi::Value Call::InUse(const std::string& detail) const {
  Napi::Error error = MakeError(env_, domain_, domain_ == Domain::Rpma ? RPMA_E_INVAL : EBUSY, operation_, detail);
  if (!error.IsEmpty()) Own(error.Value(), "inUse", Napi::Boolean::New(env_, true));
  Throw(error);
  return env_.Undefined();
}

namespace {

thread_local std::string captured;

// librpma 1.2's rpma_log_function: printf-like, called on the failing call's thread.
void Capture(enum rpma_log_level level, const char* /* file */, const int /* line */, const char* function,
             const char* format, ...) {
  if (level > RPMA_LOG_LEVEL_WARNING) return;
  char text[512];
  va_list args;
  va_start(args, format);
  std::vsnprintf(text, sizeof text, format, args);
  va_end(args);
  std::size_t end = std::strlen(text);
  while (end > 0 && (text[end - 1] == '\n' || text[end - 1] == ' ')) text[--end] = '\0';
  // Only the last few messages matter; bound the buffer for long-lived threads.
  if (captured.size() > 2048) captured.clear();
  if (!captured.empty()) captured += "; ";
  if (function != nullptr) captured += std::string(function) + ": ";
  captured += text;
}

}  // namespace

void InstallLogCapture() {
  // Process-wide in librpma, so once per process whatever the number of Node environments.
  static std::once_flag once;
  std::call_once(once, [] { rpma_log_set_function(Capture); });
}

void ClearLog() { captured.clear(); }

std::string TakeLog() {
  std::string log;
  log.swap(captured);
  return log;
}

std::string MemlockHint(std::size_t size) {
  struct rlimit limit {};
  if (getrlimit(RLIMIT_MEMLOCK, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY || size <= limit.rlim_cur) return {};
  return "registering " + std::to_string(size) + " bytes exceeds RLIMIT_MEMLOCK (" + std::to_string(limit.rlim_cur) +
         " bytes of locked memory): raise it with `ulimit -l unlimited` in the shell, LimitMEMLOCK=infinity in a "
         "systemd unit, or --ulimit memlock=-1:-1 for a container";
}

std::string MemlockHintAfterEnomem(std::size_t size) {
  std::string single = MemlockHint(size);
  if (!single.empty()) return single;
  struct rlimit limit {};
  if (getrlimit(RLIMIT_MEMLOCK, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY) return {};
  return "the device could not pin " + std::to_string(size) +
         " more bytes: registrations together (this process's and any other locked memory) most likely passed "
         "RLIMIT_MEMLOCK (" + std::to_string(limit.rlim_cur) +
         " bytes of locked memory): raise it with `ulimit -l unlimited` in the shell, LimitMEMLOCK=infinity in a "
         "systemd unit, or --ulimit memlock=-1:-1 for a container";
}

std::string Join(const std::string& a, const std::string& b) {
  if (a.empty()) return b;
  if (b.empty()) return a;
  return a + "; " + b;
}

}  // namespace rdma
