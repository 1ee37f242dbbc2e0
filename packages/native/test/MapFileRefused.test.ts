// Issue 19, item 6: Memory.mapFile refused for its size leaves no file behind (it used to leave the
// 1 TiB sparse file it had created), on the native driver here and on the simulated one in
// packages/testing/test/MapFileRefused.test.ts.
import { Memory } from "@effect-rdma/core"
import { assert, describe, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import { constants as bufferConstants } from "node:buffer"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import * as NativeDriver from "../src/NativeDriver.js"

describe("Memory.mapFile refused for its size (native driver)", () => {
  it.scoped("creates no file", () =>
    Effect.gen(function*() {
      const dir = fs.mkdtempSync(path.join(os.tmpdir(), "mapfile-refused-"))
      const file = path.join(dir, "huge")
      const error = yield* Effect.flip(Memory.mapFile({ path: file, size: bufferConstants.MAX_LENGTH + 4096, create: true }))
      assert.strictEqual(error._tag, "MapFileError")
      assert.strictEqual(error.reason, "OutOfRange")
      assert.isFalse(fs.existsSync(file), "the refused mapping left its file behind")
      fs.rmSync(dir, { recursive: true, force: true })
    }).pipe(Effect.provide(NativeDriver.layer)))
})
