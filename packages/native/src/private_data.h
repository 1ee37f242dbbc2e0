// rdma_cm's private-data limits on RoCE and InfiniBand (the TCP port space): what a connection
// request, an accept and a rejection carry. One place for both paths (conn_req.cc for librpma,
// cm_ep.cc for librdmacm); the addon exports them as `privateDataLimits`, and a host test checks
// them against core's Arguments.PRIVATE_DATA_LIMIT, which the simulated driver uses.
#pragma once

#include <cstddef>

namespace private_data {

constexpr std::size_t kConnectLimit = 56;
constexpr std::size_t kAcceptLimit = 196;
constexpr std::size_t kRejectLimit = 148;

}  // namespace private_data
