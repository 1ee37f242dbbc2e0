// One way to run a blocking C call off the JavaScript thread and answer through a Promise:
//
//   return QueueWork<Job>(env, "rpma_mr_reg", job constructor arguments...);
//
// Job is a plain class, made in place (its constructor takes what the worker thread will use, and
// may count itself as a user of a shared state) with:
//
//   void Run();                        on a worker thread: the blocking call; nothing of JavaScript
//   Outcome Settle(Napi::Env env);     back on the JavaScript thread, only when JavaScript can run:
//                                      what the promise is resolved or rejected with
//   ~Job();                            always, last: releases whatever Settle did not hand over
//
// The promise is always settled, or dropped when nobody can hear it: if Settle gives no value (a
// handle could not be made: the heap or the stack is exhausted), a pending exception is taken and
// the promise is rejected with RPMA_E_NOMEM; when JavaScript cannot run (a worker's
// environment is being torn down) Settle is skipped and only the destructor runs. If the work
// cannot even be queued, the promise is rejected the same way and the job destroyed unrun.
#pragma once

#include <librpma.h>
#include <napi.h>

#include <memory>
#include <utility>

#include "errors.h"

namespace rdma {

// What a job's Settle gives: the value to resolve the promise with, the error to reject it with, or
// Unmade (a handle could not be made; the job released what it would have wrapped): RPMA_E_NOMEM
// with that detail. An empty value or error counts as Unmade.
struct Outcome {
  napi_value value;
  bool resolve;
  const char* unmade;
  static Outcome Resolve(napi_value value) { return {value, true, nullptr}; }
  static Outcome Reject(napi_value error) { return {error, false, nullptr}; }
  static Outcome Unmade(const char* detail) { return {nullptr, false, detail}; }
};

namespace async_work {

template <typename Job>
struct Work {
  template <typename... Args>
  Work(napi_env env, const char* operation, Args&&... args)
      : settler(env), operation(operation), job(std::forward<Args>(args)...) {}

  Settler settler;
  const char* operation;
  Job job;
  napi_async_work work = nullptr;
};

// The value could not be made, or the work not queued: an exception may be pending; take it and
// reject with RPMA_E_NOMEM (if even that error cannot be made, the promise stays unsettled: there
// is no memory left to say so).
inline void RejectForLackOfMemory(napi_env env, Settler& settler, const char* operation, const char* detail) {
  bool pending = false;
  if (napi_is_exception_pending(env, &pending) == napi_ok && pending) {
    napi_value ignored = nullptr;
    napi_get_and_clear_last_exception(env, &ignored);
  }
  if (!CanRunJs(env)) return;
  settler.Reject(MakeError(Napi::Env(env), Domain::Rpma, RPMA_E_NOMEM, operation, detail).Value());
  if (napi_is_exception_pending(env, &pending) == napi_ok && pending) {
    napi_value ignored = nullptr;
    napi_get_and_clear_last_exception(env, &ignored);
  }
}

template <typename Job>
void Execute(napi_env /* not to be used off the JavaScript thread */, void* data) {
  static_cast<Work<Job>*>(data)->job.Run();
}

template <typename Job>
void Complete(napi_env env, napi_status status, void* data) {
  // Deleted on every way out: the job's destructor releases what was not handed over.
  std::unique_ptr<Work<Job>> work(static_cast<Work<Job>*>(data));
  napi_delete_async_work(env, work->work);
  // Cancelled (never ran), or the environment is torn down: nobody would hear the answer.
  if (status != napi_ok || !CanRunJs(env)) return;
  Outcome outcome = work->job.Settle(Napi::Env(env));
  // A value half made (a property could not be set) leaves an exception pending, and a promise is
  // not settled while one is: counted as unmade.
  bool pending = false;
  if (outcome.value == nullptr || (napi_is_exception_pending(env, &pending) == napi_ok && pending)) {
    RejectForLackOfMemory(env, work->settler, work->operation,
                          outcome.unmade != nullptr ? outcome.unmade : "cannot make the result");
    return;
  }
  if (outcome.resolve) work->settler.Resolve(outcome.value);
  else work->settler.Reject(outcome.value);
}

}  // namespace async_work

// Makes a Job from `args`, runs it (see above) and returns its promise; an empty value (undefined
// to JavaScript) when JavaScript cannot run, the job then destroyed unrun.
template <typename Job, typename... Args>
Napi::Value QueueWork(napi_env env, const char* operation, Args&&... args) {
  auto work = std::make_unique<async_work::Work<Job>>(env, operation, std::forward<Args>(args)...);
  Napi::Value promise = work->settler.Promise();
  if (promise.IsEmpty()) return promise;  // JavaScript cannot run: nobody would hear the answer
  napi_value name = nullptr;
  if (napi_create_string_utf8(env, operation, NAPI_AUTO_LENGTH, &name) != napi_ok ||
      napi_create_async_work(env, nullptr, name, async_work::Execute<Job>, async_work::Complete<Job>, work.get(),
                             &work->work) != napi_ok) {
    async_work::RejectForLackOfMemory(env, work->settler, operation, "cannot queue the work");
    return promise;
  }
  if (napi_queue_async_work(env, work->work) != napi_ok) {
    napi_delete_async_work(env, work->work);
    async_work::RejectForLackOfMemory(env, work->settler, operation, "cannot queue the work");
    return promise;
  }
  work.release();  // Complete deletes it
  return promise;
}

}  // namespace rdma
