{
  "targets": [
    {
      "target_name": "rpma_addon",
      "sources": [
        "../src/addon.cc",
        "../src/errors.cc",
        "../src/memory.cc",
        "../src/peer.cc",
        "../src/mr.cc",
        "../src/cm.cc",
        "../src/poll.cc",
        "../src/conn_common.cc",
        "../src/endpoint.cc",
        "../src/conn_req.cc",
        "../src/conn.cc",
        "../src/post.cc",
        "../src/post_window.cc",
        "../src/completions.cc",
        "../src/spin.cc",
        "../src/srq.cc",
        "../src/cm_ep.cc",
        "../src/cm_ep_post.cc"
      ],
      "dependencies": ["<!(node -p \"require('node-addon-api').targets\"):node_addon_api"],
      "defines": [
        "NAPI_VERSION=8",
        "NODE_ADDON_API_DISABLE_DEPRECATED",
        "NODE_API_SWALLOW_UNTHROWABLE_EXCEPTIONS"
      ],
      "include_dirs": ["<!@(pkg-config --cflags-only-I librpma librdmacm libibverbs | sed s/-I//g)"],
      "libraries": ["<!@(pkg-config --libs librpma librdmacm libibverbs)"],
      "cflags_cc": ["-Wall", "-Wextra"]
    }
  ]
}
