import { RdmaDriver } from "@effect-rdma/core/Driver"
import { assert, describe, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Layer from "effect/Layer"
import { spawnSync } from "node:child_process"
import { mkdirSync, mkdtempSync, writeFileSync } from "node:fs"
import { createRequire } from "node:module"
import { tmpdir } from "node:os"
import { join } from "node:path"
import * as Load from "../src/internal/load.js"
import * as NativeDriver from "../src/NativeDriver.js"
import * as RpmaBinding from "../src/RpmaBinding.js"
import { childNode } from "./fixtures/childNode.js"

describe("loading the addon", () => {
  it.effect("the addon is built and NativeDriver.layer builds", () =>
    Effect.gen(function*() {
      const driver = yield* RdmaDriver
      assert.strictEqual(driver.name, "native")
      const live = yield* driver.live
      for (const kind of ["peers", "localRegions", "remoteRegions", "cmRegions", "cmEndpoints"] as const) {
        assert.isNumber(live[kind], kind)
      }
    }).pipe(Effect.provide(NativeDriver.layer)))

  it.effect("a missing build is AddonNotBuilt, with the command to run", () =>
    Effect.gen(function*() {
      const error = yield* Effect.flip(RpmaBinding.load("/nonexistent/build/Release/rpma_addon.node"))
      assert.strictEqual(error._tag, "NativeLoadError")
      assert.strictEqual(error.reason, "AddonNotBuilt")
      assert.include(error.message, "npx effect-rdma-build-addon")
      assert.include(error.message, `node ${join(Load.packageRoot, "scripts", "build.mjs")}`)
      assert.include(error.message, "sudo apt-get install build-essential")
    }))

  it.effect("the layer fails with the tagged error, not a defect", () =>
    Effect.gen(function*() {
      const layer = Layer.provide(NativeDriver.layerWithBinding, RpmaBinding.layerFromPath("/nonexistent.node"))
      const error = yield* Effect.flip(Effect.provide(RdmaDriver, layer))
      assert.strictEqual(error.reason, "AddonNotBuilt")
    }))

  it.effect("a file that is not a shared object is Unknown, with dlopen's reason", () =>
    Effect.gen(function*() {
      const path = join(mkdtempSync(join(tmpdir(), "rpma-")), "garbage.node")
      writeFileSync(path, Buffer.alloc(4096, 0x41)) // long enough for dlopen to read a header
      const error = yield* Effect.flip(RpmaBinding.load(path))
      assert.strictEqual(error.reason, "Unknown")
      assert.include(error.message, "invalid ELF header") // dlopen's own reason
    }))

  it("a missing shared library is LibraryMissing, naming the Debian package", () => {
    const dlopen = (library: string) =>
      Object.assign(new Error(`${library}: cannot open shared object file: No such file or directory`), {
        code: "ERR_DLOPEN_FAILED"
      })
    const cases = [["librpma.so.0", "librpma0"], ["librpma.so.1", "librpma1"], ["librdmacm.so.1", "librdmacm1"], [
      "libibverbs.so.1",
      "libibverbs1"
    ]] as const
    for (const [library, pkg] of cases) {
      const error = RpmaBinding.classify("/x.node", dlopen(library))
      assert.strictEqual(error.reason, "LibraryMissing")
      assert.strictEqual(error.library, library)
      assert.strictEqual(error.debianPackage, pkg)
      assert.include(error.message, `apt-get install ${pkg}`)
    }
  })

  it("an addon built for another Node.js ABI is AbiMismatch", () => {
    const message = "The module was compiled against a different Node.js version using NODE_MODULE_VERSION 108"
    const cause = Object.assign(new Error(message), { code: "ERR_DLOPEN_FAILED" })
    assert.strictEqual(RpmaBinding.classify("/x.node", cause).reason, "AbiMismatch")
  })

  it.effect("an addon whose recorded ABI is not this Node.js's is refused before it is loaded", () =>
    Effect.gen(function*() {
      const dir = mkdtempSync(join(tmpdir(), "rpma-"))
      // A prebuild's tag, and a local build's sidecar: neither file is ever dlopened.
      const tagged = join(dir, "rpma_addon.abi1.glibc.node")
      writeFileSync(tagged, "not an addon")
      const built = join(dir, "rpma_addon.node")
      writeFileSync(built, "not an addon")
      writeFileSync(`${built}.json`, JSON.stringify({ abi: "1", node: "v0.0.0", platform: "linux", arch: "x64" }))
      for (const path of [tagged, built]) {
        const error = yield* Effect.flip(RpmaBinding.load(path))
        assert.strictEqual(error.reason, "AbiMismatch", path)
        assert.include(error.message, `built for Node.js ABI 1, but this is Node.js ${process.version}`)
        assert.include(error.message, "npx effect-rdma-build-addon")
      }
    }))

  it("the addon that fits this Node.js is picked, and none that fits is named with what is shipped", () => {
    const root = mkdtempSync(join(tmpdir(), "rpma-"))
    const target = `${process.platform}-${process.arch}`
    const other = process.versions.modules === "115" ? "127" : "115"
    const otherTarget = process.arch === "arm64" ? "linux-x64" : "linux-arm64"
    mkdirSync(join(root, "prebuilds", target), { recursive: true })
    mkdirSync(join(root, "prebuilds", otherTarget), { recursive: true })
    writeFileSync(join(root, "prebuilds", target, `rpma_addon.abi${other}.glibc.node`), "")
    writeFileSync(join(root, "prebuilds", otherTarget, "rpma_addon.abi147.glibc.node"), "")
    const none = (() => {
      try {
        return Load.resolveAddon(root)
      } catch (error) {
        return error as Error & { code?: string }
      }
    })()
    assert.instanceOf(none, Error)
    assert.strictEqual(none.code, "MODULE_NOT_FOUND")
    assert.include(none.message, `no addon for Node.js ${process.version} (`)
    assert.include(none.message, `ABI ${other} (Node.js ${other === "115" ? "20" : "22"})`)
    assert.include(none.message, `${otherTarget} glibc: ABI 147 (Node.js 26)`)
    // A local build for another ABI gives way to a prebuilt addon that fits.
    const fitting = join(root, "prebuilds", target, `rpma_addon.abi${process.versions.modules}.${Load.libc()}.node`)
    writeFileSync(fitting, "")
    const local = join(root, "build", "Release", "rpma_addon.node")
    mkdirSync(join(root, "build", "Release"), { recursive: true })
    writeFileSync(local, "")
    writeFileSync(Load.buildInfoPath(local), JSON.stringify({ abi: other }))
    assert.strictEqual(Load.resolveAddon(root), fitting)
    // A local build for this ABI wins over every prebuilt addon.
    writeFileSync(Load.buildInfoPath(local), JSON.stringify({ abi: process.versions.modules }))
    assert.strictEqual(Load.resolveAddon(root), local)
  })

  it.effect("a fake binding can stand in for the addon", () =>
    Effect.gen(function*() {
      const driver = yield* RdmaDriver
      const error = yield* Effect.flip(driver.peerDelete(null as never))
      assert.strictEqual(error._tag, "RpmaInvalidError")
      assert.strictEqual(error.detail, "fake")
    }).pipe(
      Effect.provide(NativeDriver.layerWithBinding),
      Effect.provideService(RpmaBinding.RpmaBinding, {
        installLogCapture: () => {},
        peerDelete: () => {
          throw Object.assign(new Error("fake"), { code: -100004, operation: "rpma_peer_delete", detail: "fake" })
        }
      } as unknown as RpmaBinding.Binding)
    ))

  it("bundled into one file, away from its package: NativeLoadError Bundled, saying to mark it external", async () => {
    // vitest's own esbuild (not a dependency of this package), as a user's bundler would run.
    const esbuild = createRequire(createRequire(import.meta.url).resolve("vitest"))("esbuild") as {
      build: (options: Record<string, unknown>) => Promise<unknown>
    }
    const dir = mkdtempSync(join(tmpdir(), "rpma-bundle-"))
    writeFileSync(
      join(dir, "main.ts"),
      `import { Effect } from "effect"
import { RpmaBinding } from ${JSON.stringify(join(Load.packageRoot, "src", "index.ts"))}
const error = await Effect.runPromise(Effect.flip(RpmaBinding.load()))
console.log(JSON.stringify({ reason: error.reason, message: error.message }))
`
    )
    await esbuild.build({
      entryPoints: [join(dir, "main.ts")],
      outfile: join(dir, "bundle.mjs"),
      bundle: true,
      platform: "node",
      format: "esm",
      // The entry sits outside the workspace; its imports resolve from this package.
      nodePaths: [join(Load.packageRoot, "node_modules")],
      logLevel: "error"
    })
    const run = spawnSync(...childNode([join(dir, "bundle.mjs")]), { encoding: "utf8", timeout: 60_000 })
    assert.strictEqual(run.status, 0, run.stderr)
    const { message, reason } = JSON.parse(run.stdout) as { reason: string; message: string }
    assert.strictEqual(reason, "Bundled")
    assert.include(message, "@effect-rdma/native was bundled")
    assert.include(message, join(dir, "bundle.mjs"))
    assert.include(message, "--external:@effect-rdma/native")
  }, 120_000)
})
