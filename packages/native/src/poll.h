// Waiting without blocking the event loop: a Poller watches one file descriptor of librpma's (an
// endpoint's or a connection's event channel, a completion channel) with a libuv uv_poll_t and
// keeps the JavaScript callbacks waiting on it. No thread per wait; the only calls made on the
// loop are librpma's non-blocking ones, once the descriptor is readable.
//
// A uv_poll_t is freed by its uv_close callback, never before: closing is asynchronous, so the
// handle lives in its own allocation, apart from the Poller (which may be gone by then). The
// PollSet of each Node environment knows every open Poller; an async cleanup hook closes them
// all when the environment is torn down, and lets Node finish only once libuv has freed them.
#pragma once

#include <napi.h>
#include <uv.h>

#include <cstddef>
#include <deque>
#include <functional>
#include <memory>
#include <set>
#include <utility>

struct rpma_conn_cfg;

namespace rdma {

class Poller;

// One JavaScript callback, `(error, value) => void`, waiting for a result.
struct Waiter {
  Waiter() = default;
  Waiter(Waiter&& other) noexcept { *this = std::move(other); }
  Waiter& operator=(Waiter&& other) noexcept;
  Waiter(const Waiter&) = delete;
  Waiter& operator=(const Waiter&) = delete;
  ~Waiter();
  double id = 0;
  Napi::FunctionReference callback;
  rpma_conn_cfg* cfg = nullptr;  // an endpoint's wait: the configuration of the request to come
  bool direct_write_to_pmem = false;  // and what to apply once it is connected
  std::shared_ptr<void> srq;          // and the shared receive queue its cfg names, kept alive
  Napi::Reference<Napi::Value> into;  // a completions wait's Float64Array (waitPacked): the count is answered
};

class PollSet {
 public:
  // Per environment, kept in the Module; registers the teardown hook.
  static PollSet* Create(Napi::Env env);

  napi_env env = nullptr;
  uv_loop_t* loop = nullptr;
  napi_async_context context = nullptr;
  std::set<Poller*> open;
  std::size_t closing = 0;  // uv_close calls whose callback has not run yet
  bool torn_down = false;
  napi_async_cleanup_hook_handle hook = nullptr;

 private:
  static void OnTeardown(napi_async_cleanup_hook_handle handle, void* data);
  void FinishIfDone();
  friend class Poller;
};

class Poller {
 public:
  // `on_readable(env, status)` runs on the loop, in a handle scope, when the descriptor is
  // readable (status 0) or libuv reports an error on it (a negative uv error).
  explicit Poller(std::function<void(Napi::Env, int)> on_readable) : on_readable_(std::move(on_readable)) {}
  Poller(const Poller&) = delete;
  Poller& operator=(const Poller&) = delete;
  ~Poller() { Close(); }

  // Starts (or keeps) watching `fd` for reading; makes it non-blocking. Returns 0 or an errno.
  int Watch(Napi::Env env, int fd);
  // Stops watching until the next Watch; the handle is kept.
  void Pause();
  // Stops for good (uv_close); the waiters stay, for the owner to fail or drop.
  void Close();
  bool Watching() const { return handle_ != nullptr && active_; }

  // Takes the waiter with this id out of the queue; false if none.
  bool Cancel(double id);
  // Pauses when nobody waits any more.
  void PauseIfIdle();

  std::deque<Waiter> waiters;

 private:
  struct UvHandle {
    uv_poll_t poll;
    Poller* owner;
    PollSet* set;
  };
  static void OnPoll(uv_poll_t* poll, int status, int events);
  static void OnClosed(uv_handle_t* handle);
  friend class PollSet;

  UvHandle* handle_ = nullptr;
  bool active_ = false;
  int fd_ = -1;
  std::function<void(Napi::Env, int)> on_readable_;
};

// Whether `fd` has something to read now (poll with a zero timeout).
bool Readable(int fd);

// Calls a waiter's callback with (error, value): from the loop through MakeCallback (so that
// promises and nextTick queued by it run), from within a JavaScript call directly. An exception
// thrown by the callback on the loop becomes an uncaught exception.
void Deliver(Napi::Env env, Waiter& waiter, napi_value error, napi_value value, bool from_loop);

// A fresh id for a waiter.
double NextWaitId();

}  // namespace rdma
