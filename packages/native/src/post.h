// What librpma's two posting paths on a connection share: post.cc's `post` (a request read from an
// object) and post_window.cc's `postWindow` (a window of requests read from numbers). The same
// checks, in the same order and words, and the same rpma call, whichever way a request was read.
#pragma once

#include <librpma.h>

#include <cstddef>
#include <cstdint>

#include "errors.h"

namespace rdma {
namespace post {

// The data operations both paths post (flush and atomicWrite go through `post` only).
enum class Op { Write, Read, Send, Recv };

const char* OperationName(Op op);

// The completion flags of a request whose `completion` is valid ("always", "onError" or none) and
// asks for onError (`on_error`): a receive always completes. False after a refusal.
bool SignalFlags(const Call& call, bool valid, bool on_error, bool recv, int* flags);
// Immediate data goes with a write or a send only, and is a uint32. False after a refusal.
bool ImmediateAllowed(const Call& call, bool write_or_send);

// rpma_write(_with_imm) / rpma_read / rpma_send(_with_imm) / rpma_recv, the numbers checked already
// (integers in range): a write goes from `local` at `src_offset` to `remote` at `dst_offset`, a read
// from `remote` at `src_offset` to `local` at `dst_offset`; a send or a receive use `local` at `src_offset`.
int PostData(rpma_conn* conn, Op op, rpma_mr_remote* remote, rpma_mr_local* local, double dst_offset,
             double src_offset, double length, int flags, bool with_imm, double imm, const void* context);

}  // namespace post
}  // namespace rdma
