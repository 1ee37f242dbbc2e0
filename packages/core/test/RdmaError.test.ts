import { RdmaClient, RdmaError, RegistrationCache } from "@effect-rdma/core"
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"

const codes: ReadonlyArray<[string, number, string]> = [
  ["RPMA_E_UNKNOWN", -100000, "RpmaUnknownError"],
  ["RPMA_E_NOSUPP", -100001, "RpmaNoSupportError"],
  ["RPMA_E_PROVIDER", -100002, "RpmaProviderError"],
  ["RPMA_E_NOMEM", -100003, "RpmaNoMemoryError"],
  ["RPMA_E_INVAL", -100004, "RpmaInvalidError"],
  ["RPMA_E_NO_COMPLETION", -100005, "RpmaNoCompletionError"],
  ["RPMA_E_NO_EVENT", -100006, "RpmaNoEventError"],
  ["RPMA_E_AGAIN", -100007, "RpmaAgainError"],
  ["RPMA_E_SHARED_CHANNEL", -100008, "RpmaSharedChannelError"],
  ["RPMA_E_NOT_SHARED_CHNL", -100009, "RpmaNotSharedChannelError"]
]

describe("RdmaError", () => {
  it("maps every librpma code to its own tagged error", () => {
    for (const [name, code, tag] of codes) {
      const error = RdmaError.fromRpmaCode(code, "rpma_mr_reg", "why")
      assert.strictEqual(error._tag, tag)
      assert.strictEqual(error.code, code)
      assert.strictEqual(error.codeName, name)
      assert.strictEqual(error.operation, "rpma_mr_reg")
      assert.strictEqual(RdmaError.RpmaCode[name as RdmaError.RpmaCodeName], code)
      assert.isTrue(RdmaError.isRpmaError(error))
      assert.match(error.message, new RegExp(`^rpma_mr_reg failed with ${name} \\(${code}\\): .*: why$`))
    }
  })

  it("keeps an unknown code instead of losing it", () => {
    const error = RdmaError.fromRpmaCode(-42, "rpma_peer_new")
    assert.strictEqual(error._tag, "RpmaUnknownError")
    assert.match(error.message, /unexpected return code -42/)
  })

  it("names errno values", () => {
    const error = RdmaError.fromErrno(12, "rdma_reg_msgs")
    assert.strictEqual(error._tag, "RdmaCmError")
    assert.strictEqual(error.errnoName, "ENOMEM")
    assert.strictEqual(RdmaError.errnoName(22), "EINVAL")
    assert.strictEqual(RdmaError.errnoName(99999), "E99999")
    assert.strictEqual(error.message, "rdma_reg_msgs failed with ENOMEM (errno 12)")
  })

  it.effect("each error can be caught by its tag", () =>
    Effect.gen(function*() {
      for (const [, code, tag] of codes) {
        const caught = yield* Effect.fail(RdmaError.fromRpmaCode(code, "op")).pipe(
          Effect.catchTags({
            RpmaUnknownError: (e) => Effect.succeed(e._tag),
            RpmaNoSupportError: (e) => Effect.succeed(e._tag),
            RpmaProviderError: (e) => Effect.succeed(e._tag),
            RpmaNoMemoryError: (e) => Effect.succeed(e._tag),
            RpmaInvalidError: (e) => Effect.succeed(e._tag),
            RpmaNoCompletionError: (e) => Effect.succeed(e._tag),
            RpmaNoEventError: (e) => Effect.succeed(e._tag),
            RpmaAgainError: (e) => Effect.succeed(e._tag),
            RpmaSharedChannelError: (e) => Effect.succeed(e._tag),
            RpmaNotSharedChannelError: (e) => Effect.succeed(e._tag)
          })
        )
        assert.strictEqual(caught, tag)
      }
    }))

  it("one class per tag: RegistrationCache's and RdmaClient's InvalidOptionsError are RdmaError's, told apart by module", () => {
    assert.strictEqual(RegistrationCache.InvalidOptionsError, RdmaError.InvalidOptionsError)
    assert.strictEqual(RdmaClient.InvalidOptionsError, RdmaError.InvalidOptionsError)
    const error = new RdmaError.InvalidOptionsError({
      module: "RdmaClient",
      option: "reconnect",
      detail: "must be a Schedule"
    })
    assert.strictEqual(error._tag, "InvalidOptionsError")
    assert.strictEqual(error.message, "RdmaClient.make: the option reconnect must be a Schedule")
  })

  it("errno names come from one table, which errnoName reads backwards", () => {
    assert.strictEqual(RdmaError.Errno.ETIMEDOUT, 110) // Linux's, as librdmacm reports it
    assert.strictEqual(RdmaError.Errno.ECONNREFUSED, 111)
    assert.strictEqual(RdmaError.errnoName(RdmaError.Errno.EADDRINUSE), "EADDRINUSE")
    assert.strictEqual(RdmaError.fromErrno(RdmaError.Errno.EINVAL, "rdma_connect").errnoName, "EINVAL")
  })
})
