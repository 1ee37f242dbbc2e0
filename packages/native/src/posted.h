// The one record of a posted work request, on both data paths: librpma's connections, connection
// requests and shared receive queues (post.cc, completions.cc) and librdmacm's verbs endpoints
// (cm_ep_post.cc). Each keeps its requests by token, the work request id the device hands back.
#pragma once

#include <cstdint>
#include <map>
#include <memory>

namespace rdma {

struct MrLocalState;

// A posted work request until its completion is returned (for an unsignalled one: until a later
// send-queue request completes, the send queue of a reliable connection completing in order).
// `Hold` keeps what the device reads or writes (regions, bytes) alive until then, and lets it go
// when the record is erased: with the request's completion, or when its queue pair is destroyed.
template <typename Hold>
struct PostedRequest {
  double id = 0;
  bool recv = false;
  bool signalled = true;
  Hold hold;
};

// Posted requests by token; tokens grow with each post, so the map is in posting order.
template <typename Hold>
using PostedRequests = std::map<uint64_t, PostedRequest<Hold>>;

// The send-queue request under `found` completed: the unsignalled send-queue requests posted before
// it have succeeded. Each is erased from `posted` by `forget(iterator)`, which returns the next one.
template <typename Hold, typename Forget>
void ForgetCovered(PostedRequests<Hold>& posted, typename PostedRequests<Hold>::iterator found, Forget forget) {
  for (auto it = posted.begin(); it != found;) {
    if (it->second.recv || it->second.signalled) {
      ++it;
      continue;
    }
    it = forget(it);
  }
}

// librpma's hold: the one local region a request reads or writes, if any, counted in its
// `in_flight` (its deregistration refused) from the post until the record is erased.
class InFlight {
 public:
  InFlight() = default;
  explicit InFlight(std::shared_ptr<MrLocalState> region);
  InFlight(InFlight&& other) noexcept = default;
  InFlight& operator=(InFlight&& other) noexcept;
  InFlight(const InFlight&) = delete;
  InFlight& operator=(const InFlight&) = delete;
  ~InFlight() { Release(); }

 private:
  void Release();
  std::shared_ptr<MrLocalState> region_;
};

}  // namespace rdma
