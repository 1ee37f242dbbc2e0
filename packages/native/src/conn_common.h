// Helpers shared by the files of connections and their queues (endpoint.cc, conn_req.cc,
// conn.cc, post.cc, completions.cc, srq.cc): argument parsing, error values, and starting and
// failing the waits on librpma file descriptors.
#pragma once

#include <librpma.h>
#include <napi.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "errors.h"
#include "handles.h"
#include "poll.h"

namespace rdma {
namespace conn {

constexpr double kMaxSafe = 9007199254740991.0;  // 2^53 - 1
constexpr double kMaxLength = 4294967295.0;      // librpma posts lengths as uint32_t

std::string NumberText(double value);
Napi::Value RpmaErrorValue(Napi::Env env, int code, const char* operation, const std::string& detail);
// A JavaScript number that is an integer in [0, max], or a refusal through `call`.
bool Integer(const Call& call, Napi::Value value, const char* what, double max, double* out);
// The same check of a number already read (from a Float64Array).
bool Integer(const Call& call, double number, const char* what, double max, double* out);
// core's ConnConfig: { timeoutMs, sqSize, rqSize, cqSize, directWriteToPmem, srq }.
bool ParseConfig(const Call& call, Napi::Value value, ConnConfig* out);
Napi::Uint8Array CopyBytes(Napi::Env env, const void* data, std::size_t size);
// Why librpma could not set up a connection to `target` (rpma_conn_req_new, rpma_ep_next_conn_req)
// and what to change, from the verb its log names; librpma's own reason is for the caller to add.
std::string SetupFailure(const std::string& log, const ConnConfig& config, ibv_context* context,
                         const std::string& target);

// A read on a non-blocking descriptor found nothing: librpma reports it as a provider error.
bool NothingYet(int code, int errnum);
// Fails every waiter of `poller`, with the descriptor's libuv error: RPMA_E_PROVIDER in librpma's
// domain, EIO in librdmacm's (errno).
void FailAll(Napi::Env env, Poller& poller, const char* operation, int status, Domain domain = Domain::Rpma);
Napi::Object NewConnReq(Napi::Env env, rpma_conn_req* req, const std::shared_ptr<PeerState>& peer,
                        const std::shared_ptr<EndpointState>& endpoint, const ConnConfig& config);
// Adds a waiter for `callback` to `poller` and starts watching `fd`; returns its id, or throws
// (RPMA_E_PROVIDER in librpma's domain, the errno in librdmacm's).
Napi::Value StartWait(const Call& call, Poller& poller, int fd, Napi::Value callback, rpma_conn_cfg* cfg = nullptr,
                      bool direct_write_to_pmem = false, std::shared_ptr<void> srq = nullptr);
bool IsCallback(const Call& call, Napi::Value value);

// A Float64Array of completions, `fields` numbers each, to drain into: its numbers and how many
// completions it holds, or false after the refusal (anything else, or too short for one).
bool CompletionRows(const Call& call, Napi::Value value, uint32_t fields, double** data, uint32_t* capacity);
// The same without a refusal: false for anything that is not (or no longer, detached) such an array.
bool CompletionRowsOf(napi_env env, napi_value value, uint32_t fields, double** data, uint32_t* capacity);

}  // namespace conn

void RegisterEndpoint(Napi::Env env, Napi::Object exports);
void RegisterConnReq(Napi::Env env, Napi::Object exports);
void RegisterPost(Napi::Env env, Napi::Object exports);
void RegisterPostWindow(Napi::Env env, Napi::Object exports);

}  // namespace rdma
