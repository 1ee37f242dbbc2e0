#include "poll.h"

#include <fcntl.h>
#include <librpma.h>
#include <poll.h>

#include <atomic>
#include <cerrno>
#include <cstdint>

#include "handles.h"

namespace rdma {

Waiter& Waiter::operator=(Waiter&& other) noexcept {
  if (this == &other) return *this;
  if (cfg != nullptr) rpma_conn_cfg_delete(&cfg);
  id = other.id;
  callback = std::move(other.callback);
  cfg = other.cfg;
  other.cfg = nullptr;
  direct_write_to_pmem = other.direct_write_to_pmem;
  srq = std::move(other.srq);
  into = std::move(other.into);
  return *this;
}

Waiter::~Waiter() {
  if (cfg != nullptr) rpma_conn_cfg_delete(&cfg);
}

double NextWaitId() {
  // Every worker thread that loads the addon shares this counter: atomic. 2^53 waits is enough.
  static std::atomic<uint64_t> next{0};
  return static_cast<double>(++next);
}

bool Readable(int fd) {
  struct pollfd p {};
  p.fd = fd;
  p.events = POLLIN;
  int ready;
  do {
    ready = ::poll(&p, 1, 0);
  } while (ready < 0 && errno == EINTR);
  return ready > 0 && (p.revents & (POLLIN | POLLERR | POLLHUP)) != 0;
}

PollSet* PollSet::Create(Napi::Env env) {
  auto* set = new PollSet();
  set->env = env;
  if (napi_get_uv_event_loop(env, &set->loop) != napi_ok) {
    delete set;
    return nullptr;
  }
  napi_value resource = Napi::Object::New(env);
  napi_value name = Napi::String::New(env, "effect-rdma:wait");
  if (napi_async_init(env, resource, name, &set->context) != napi_ok) set->context = nullptr;
  if (napi_add_async_cleanup_hook(env, OnTeardown, set, &set->hook) != napi_ok) set->hook = nullptr;
  return set;
}

void PollSet::OnTeardown(napi_async_cleanup_hook_handle /* handle */, void* data) {
  auto* set = static_cast<PollSet*>(data);
  set->torn_down = true;
  // Close() erases from `open`: iterate over a copy.
  std::set<Poller*> pollers = set->open;
  for (Poller* poller : pollers) {
    poller->waiters.clear();  // their fibers go with the environment
    poller->Close();
  }
  if (set->context != nullptr) napi_async_destroy(set->env, set->context);
  set->context = nullptr;
  // Later finalizers find no PollSet: nothing can start watching during teardown.
  Module* module = nullptr;
  if (napi_get_instance_data(set->env, reinterpret_cast<void**>(&module)) == napi_ok && module != nullptr) {
    module->polls = nullptr;
  }
  set->FinishIfDone();
}

void PollSet::FinishIfDone() {
  if (!torn_down || closing != 0) return;
  if (hook != nullptr) napi_remove_async_cleanup_hook(hook);
  delete this;
}

int Poller::Watch(Napi::Env env, int fd) {
  if (handle_ != nullptr && fd_ != fd) Close();
  if (handle_ == nullptr) {
    Module* module = env.GetInstanceData<Module>();
    PollSet* set = module != nullptr ? module->polls : nullptr;
    if (set == nullptr || set->torn_down) return ESHUTDOWN;
    int flags = fcntl(fd, F_GETFL);
    if (flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0) return errno != 0 ? errno : EBADF;
    auto* handle = new UvHandle();
    handle->owner = this;
    handle->set = set;
    int result = uv_poll_init(set->loop, &handle->poll, fd);
    if (result != 0) {
      delete handle;
      return -result;
    }
    handle->poll.data = handle;
    handle_ = handle;
    fd_ = fd;
    set->open.insert(this);
  }
  if (active_) return 0;
  int result = uv_poll_start(&handle_->poll, UV_READABLE, OnPoll);
  if (result != 0) return -result;
  active_ = true;
  return 0;
}

void Poller::Pause() {
  if (handle_ == nullptr || !active_) return;
  uv_poll_stop(&handle_->poll);
  active_ = false;
}

void Poller::PauseIfIdle() {
  if (waiters.empty()) Pause();
}

bool Poller::Cancel(double id) {
  for (auto it = waiters.begin(); it != waiters.end(); ++it) {
    if (it->id != id) continue;
    waiters.erase(it);
    PauseIfIdle();
    return true;
  }
  return false;
}

void Poller::Close() {
  if (handle_ == nullptr) return;
  UvHandle* handle = handle_;
  handle_ = nullptr;
  active_ = false;
  fd_ = -1;
  // uv_close stops the watch and takes the descriptor out of epoll now, before its owner closes it.
  handle->owner = nullptr;
  handle->set->open.erase(this);
  handle->set->closing++;
  uv_close(reinterpret_cast<uv_handle_t*>(&handle->poll), OnClosed);
}

void Poller::OnClosed(uv_handle_t* raw) {
  auto* handle = static_cast<UvHandle*>(raw->data);
  PollSet* set = handle->set;
  delete handle;
  set->closing--;
  set->FinishIfDone();
}

void Poller::OnPoll(uv_poll_t* poll, int status, int /* events */) {
  auto* handle = static_cast<UvHandle*>(poll->data);
  Poller* poller = handle->owner;
  if (poller == nullptr || handle->set->torn_down) return;
  Napi::Env env(handle->set->env);
  Napi::HandleScope scope(env);
  // The loop still turns while the environment is torn down, before the cleanup hook has run.
  if (!CanRunJs(env)) return;
  poller->on_readable_(env, status);
}

void Deliver(Napi::Env env, Waiter& waiter, napi_value error, napi_value value, bool from_loop) {
  if (waiter.callback.IsEmpty()) return;
  Napi::FunctionReference callback = std::move(waiter.callback);
  if (!CanRunJs(env)) return;
  if (!from_loop) {
    // Within a JavaScript call: every waiter hears, and the first exception a callback throws is
    // the one left pending for the caller.
    napi_value first = nullptr;
    bool pending = false;
    if (napi_is_exception_pending(env, &pending) == napi_ok && pending) napi_get_and_clear_last_exception(env, &first);
    napi_value args[2] = {error != nullptr ? error : env.Undefined(), value != nullptr ? value : env.Undefined()};
    napi_value ignored = nullptr;
    napi_status status = napi_call_function(env, env.Undefined(), callback.Value(), 2, args, &ignored);
    if (first != nullptr) {
      if (status != napi_ok) napi_get_and_clear_last_exception(env, &ignored);
      napi_throw(env, first);
    }
    return;
  }
  napi_value args[2] = {error != nullptr ? error : env.Undefined(), value != nullptr ? value : env.Undefined()};
  Module* module = env.GetInstanceData<Module>();
  napi_async_context context = module != nullptr && module->polls != nullptr ? module->polls->context : nullptr;
  napi_value ignored = nullptr;
  napi_make_callback(env, context, env.Global(), callback.Value(), 2, args, &ignored);
  if (env.IsExceptionPending()) {
    Napi::Error thrown = env.GetAndClearPendingException();
    napi_fatal_exception(env, thrown.Value());
  }
}

}  // namespace rdma
