// The doctor on this host, which has no RDMA device: the report's shape, the no-device finding,
// the memlock logic, and the bin's --json output and exit code.
import { assert, describe, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import { spawn } from "node:child_process"
import { readFileSync } from "node:fs"
import { dirname, join } from "node:path"
import { fileURLToPath } from "node:url"
import * as Checks from "../src/doctor/Checks.js"
import * as Cli from "../src/doctor/Cli.js"
import * as Report from "../src/doctor/Report.js"
import * as Size from "../src/doctor/Size.js"
import * as System from "../src/doctor/System.js"
import * as RpmaBinding from "../src/RpmaBinding.js"
import { childNode } from "./fixtures/childNode.js"

const packageRoot = join(dirname(fileURLToPath(import.meta.url)), "..")

const byId = (report: Report.Report, id: string): Report.Check => {
  const found = report.checks.find((c) => c.id === id)
  assert.isDefined(found, `no ${id} check`)
  return found!
}

describe("doctor", () => {
  it.effect("reports every check, in order, each with a status and fixes for its problems", () =>
    Effect.gen(function*() {
      const report = yield* Checks.run({ size: Size.parse("16MiB") })
      // Fork safety is a question only where there is a device to register memory with.
      const device = byId(report, "devices").status !== "fail"
      assert.deepStrictEqual(
        report.checks.map((c) => c.id),
        ["effect", "addon", "libraries", "devices", "memlock", ...(device ? ["fork"] : [])]
      )
      assert.strictEqual(byId(report, "effect").status, "ok")
      for (const c of report.checks) {
        assert.oneOf(c.status, ["ok", "warn", "fail"], c.id)
        assert.isString(c.summary)
        assert.isNotEmpty(c.summary, c.id)
        if (c.status !== "ok") assert.isNotEmpty(c.fixes, `${c.id} is ${c.status} without a fix`)
      }
      assert.strictEqual(report.options.size, 16 * 1024 ** 2)
      assert.deepStrictEqual(report.counts, {
        ok: report.checks.filter((c) => c.status === "ok").length,
        warn: report.checks.filter((c) => c.status === "warn").length,
        fail: report.checks.filter((c) => c.status === "fail").length
      })
      assert.strictEqual(report.ok, report.counts.fail === 0)
    }))

  it.effect("loads the addon and names librpma and rdma-core", () =>
    Effect.gen(function*() {
      const report = yield* Checks.run()
      const addon = byId(report, "addon")
      assert.strictEqual(addon.status, "ok")
      // The workspace's own build, or (under another Node.js than the one it was built with) the
      // prebuilt addon for this Node.js's ABI.
      assert.match(
        addon.summary,
        /build\/Release\/rpma_addon\.node|prebuilds\/linux-\w+\/rpma_addon\.abi\d+\.glibc\.node/
      )
      assert.strictEqual(addon.data.napiVersion, 8)
      const libraries = byId(report, "libraries")
      assert.match(libraries.summary, /^librpma \S+, rdma-core \d+\.\d+/)
    }))

  it.effect("without a device: fails, says so and what it means, and how to add Soft-RoCE", () =>
    Effect.gen(function*() {
      const report = yield* Checks.run()
      const devices = byId(report, "devices")
      assert.strictEqual(devices.status, "fail")
      assert.strictEqual(devices.summary, "no RDMA devices found")
      assert.deepStrictEqual(devices.data.devices, [])
      assert.isTrue(devices.details.some((d) => d.includes("RpmaProviderError")))
      assert.isTrue(devices.fixes.some((f) => f.includes("modprobe rdma_rxe") && f.includes("rdma link add rxe0")))
      assert.isFalse(report.ok)
    }))

  it.effect("--address: no device answers at it", () =>
    Effect.gen(function*() {
      const report = yield* Checks.run({ addresses: ["127.0.0.1"] })
      const address = byId(report, "address")
      assert.strictEqual(address.title, "address 127.0.0.1")
      assert.strictEqual(address.status, "fail")
      assert.strictEqual(address.summary, "no device answers at 127.0.0.1")
      assert.strictEqual(address.data.error, "RpmaProviderError")
      assert.include(address.fixes[0], "loopback")
    }))

  it.effect("an addon that is not built: NativeLoadError AddonNotBuilt, with the build command", () =>
    Effect.gen(function*() {
      const report = yield* Checks.run({ addonPath: "/nonexistent/build/Release/rpma_addon.node" })
      const addon = byId(report, "addon")
      assert.strictEqual(addon.status, "fail")
      assert.strictEqual(addon.data.reason, "AddonNotBuilt")
      assert.isTrue(addon.fixes.some((f) => f.includes("npx effect-rdma-build-addon")))
      assert.isTrue(addon.fixes.some((f) => f.includes("sudo apt-get install build-essential")))
      // The rest still runs, from what the kernel and dpkg show; no device, so no fork warning.
      assert.strictEqual(byId(report, "devices").status, "fail")
      assert.isUndefined(report.checks.find((c) => c.id === "fork"))
    }))

  it("effect: a version outside the supported range fails, naming it and the range", () => {
    const c = Checks.effectCheck({ version: "4.1.5", manifest: "/app/node_modules/effect/package.json" })
    assert.strictEqual(c.status, "fail")
    assert.strictEqual(c.summary, "effect 4.1.5, but @effect-rdma needs effect ^3.22.0")
    assert.include(c.fixes[0], "npm install effect@^3.22.0")
    assert.strictEqual(Checks.effectCheck({ version: "3.22.4", manifest: "" }).status, "ok")
    assert.strictEqual(Checks.effectCheck({ version: "3.21.9", manifest: "" }).status, "fail")
    assert.strictEqual(Checks.effectCheck(undefined).status, "fail")
  })

  it.effect("effect: the one this package resolves is supported here", () =>
    Effect.gen(function*() {
      const report = yield* Checks.run({ size: Size.parse("16MiB") })
      assert.match(byId(report, "effect").summary, /^effect 3\.\d+\.\d+ \(needs \^3\.22\.0\)$/)
    }))

  describe("devices (from libibverbs' list)", () => {
    const rxe = (state: string): RpmaBinding.IbvDeviceInfo => ({
      name: "rxe0",
      nodeGuid: "746d:a0ff:fe8c:047b",
      nodeType: "InfiniBand channel adapter",
      ports: [{ port: 1, state, activeMtu: 1024, linkLayer: "Ethernet" }]
    })
    const facts = (state: string): Checks.DeviceFacts => ({
      verbs: { _tag: "Listed", devices: [rxe(state)] },
      kernel: [{ name: "rxe0", ports: [{ port: 1, netdev: "dummy0" }] }],
      interfaces: [{ name: "dummy0", internal: false, addresses: ["192.168.77.1"] }]
    })

    it("an active port is ok, with its MTU, GUID, interface and addresses", () => {
      const c = Checks.devicesCheck(facts("PORT_ACTIVE"))
      assert.strictEqual(c.status, "ok")
      assert.strictEqual(c.summary, "1 device: rxe0")
      assert.strictEqual(
        c.details[0],
        "rxe0: port 1 ACTIVE, MTU 1024, Ethernet; node GUID 746d:a0ff:fe8c:047b; on dummy0 (192.168.77.1)"
      )
    })

    it("a port that is down is a warning: bring its interface up", () => {
      const c = Checks.devicesCheck(facts("PORT_DOWN"))
      assert.strictEqual(c.status, "warn")
      assert.include(c.fixes[0], "ip link set dummy0 up")
    })

    it("a kernel device that libibverbs does not list: the provider is missing", () => {
      const c = Checks.devicesCheck({ ...facts("PORT_ACTIVE"), verbs: { _tag: "Listed", devices: [] } })
      assert.strictEqual(c.status, "fail")
      assert.include(c.fixes.join(" "), "ibverbs-providers")
    })
  })

  describe("memlock", () => {
    const limited: System.MemlockFacts = {
      soft: 8 * 1024 ** 2,
      hard: 8 * 1024 ** 2,
      capIpcLock: false,
      initialUserNamespace: true,
      uid: 1000
    }

    it("a tiny size fits under the limit", () => {
      const c = Checks.memlockCheck(limited, Size.parse("4KiB")!)
      assert.strictEqual(c.status, "ok")
      assert.include(c.summary, "soft 8 MiB, hard 8 MiB")
    })

    it("a huge size fails, with every way to raise the limit", () => {
      const c = Checks.memlockCheck(limited, Size.parse("1TiB")!)
      assert.strictEqual(c.status, "fail")
      assert.include(c.summary, "below the 1 TiB to register")
      const fixes = c.fixes.join("\n")
      for (const way of ["/etc/security/limits.conf", "LimitMEMLOCK=infinity", "--ulimit memlock=-1", "prlimit"]) {
        assert.include(fixes, way)
      }
      // The hard limit is below too: ulimit -l alone cannot do it.
      assert.include(c.fixes[0], "only root")
    })

    it("a soft limit below the size but a hard limit above it: ulimit -l", () => {
      const c = Checks.memlockCheck({ ...limited, hard: "unlimited" }, Size.parse("1GiB")!)
      assert.strictEqual(c.status, "fail")
      assert.include(c.fixes[0], "ulimit -l unlimited")
      assert.include(c.fixes[0], "ulimit -l 1048576")
    })

    it("unlimited is ok for any size", () => {
      assert.strictEqual(Checks.memlockCheck({ ...limited, soft: "unlimited" }, Size.parse("1TiB")!).status, "ok")
    })

    it("CAP_IPC_LOCK lifts the limit, except in a user namespace", () => {
      const root = { ...limited, capIpcLock: true, uid: 0 }
      const huge = Size.parse("1TiB")!
      assert.strictEqual(Checks.memlockCheck(root, huge).status, "ok")
      const container = Checks.memlockCheck({ ...root, initialUserNamespace: false }, huge)
      assert.strictEqual(container.status, "fail")
      assert.isTrue(container.details.some((d) => d.includes("user namespace")))
    })

    it.effect("this process: the real limit, against a tiny and a huge size", () =>
      Effect.gen(function*() {
        const tiny = byId(yield* Checks.run({ size: 4096 }), "memlock")
        assert.strictEqual(tiny.status, "ok")
        assert.isDefined(tiny.data.soft)
        const huge = byId(yield* Checks.run({ size: 2 ** 50 }), "memlock")
        // Fails unless the limit is unlimited or CAP_IPC_LOCK lifts it (as root here).
        const lifted = huge.data.soft === "unlimited" ||
          (huge.data.capIpcLock === true && huge.data.initialUserNamespace)
        assert.strictEqual(huge.status, lifted ? "ok" : "fail")
      }))
  })

  describe("fork safety", () => {
    it("disabled is a warning that explains child_process.fork and how to fix it", () => {
      const c = Checks.forkCheck({ status: "disabled", RDMAV_FORK_SAFE: undefined, IBV_FORK_SAFE: undefined })
      assert.strictEqual(c.status, "warn")
      assert.include(c.details[0], "child_process.fork")
      assert.isTrue(c.fixes.some((f) => f.includes("RDMAV_FORK_SAFE=1")))
    })

    it("enabled and unneeded are ok", () => {
      for (const status of ["enabled", "unneeded"] as const) {
        const c = Checks.forkCheck({ status, RDMAV_FORK_SAFE: "1", IBV_FORK_SAFE: undefined })
        assert.strictEqual(c.status, "ok", status)
        assert.isEmpty(c.fixes)
      }
    })
  })

  describe("libraries (as the dynamic loader finds them)", () => {
    const facts = (fields: Partial<Checks.LibraryFacts>): Checks.LibraryFacts => ({
      mapped: {},
      loader: new Map([
        ["librpma.so.1", { found: false }],
        ["librpma.so.0", { found: true, path: "/lib/x86_64-linux-gnu/librpma.so.0" }],
        ["librdmacm.so.1", { found: true, path: "/lib/x86_64-linux-gnu/librdmacm.so.1" }],
        ["libibverbs.so.1", { found: true, path: "/lib/x86_64-linux-gnu/libibverbs.so.1" }]
      ]),
      debian: new Map([
        ["librpma0", { version: "1.2.0-1", installed: true }],
        ["librdmacm1", { version: "44.0-2", installed: true }],
        ["libibverbs1", { version: "44.0-2", installed: true }],
        ["ibverbs-providers", { version: "44.0-2", installed: true }]
      ]),
      providers: ["rxe"],
      ...fields
    })

    it("the addon needs a soname the loader does not find: fail, though dpkg lists the package", () => {
      const check = Checks.librariesCheck(facts({ missing: { library: "librpma.so.1", debianPackage: "librpma1" } }))
      assert.strictEqual(check.status, "fail")
      assert.isTrue(
        check.details.some((d) =>
          d.startsWith("librpma: the addon needs librpma.so.1, which the dynamic loader does not find") &&
          d.includes("librpma.so.0")
        ),
        check.details.join("\n")
      )
      assert.include(check.fixes, "apt-get install librpma1")
      assert.isTrue(check.fixes.some((f) => f.startsWith("or build the addon against the installed one")))
    })

    it("a library dpkg lists but the loader does not find is a failure", () => {
      const loader = new Map(facts({}).loader)
      loader.set("librdmacm.so.1", { found: false })
      const check = Checks.librariesCheck(facts({ loader }))
      assert.strictEqual(check.status, "fail")
      assert.isTrue(check.details.some((d) => d.includes("librdmacm: the dynamic loader finds none of librdmacm.so.1")))
      assert.include(check.fixes, "apt-get install librdmacm1")
    })

    it("every library the loader finds is ok, with its file", () => {
      const check = Checks.librariesCheck(facts({}))
      assert.strictEqual(check.status, "ok", check.details.join("\n"))
      assert.isTrue(
        check.details.some((d) => d.startsWith("librpma: librpma.so.0 → /lib/x86_64-linux-gnu/librpma.so.0"))
      )
    })

    it.effect("this host: the loader finds libibverbs and not a made-up soname; agrees with the addon", () =>
      Effect.gen(function*() {
        const loader = yield* System.loaderLibraries(["libibverbs.so.1", "libeffect-rdma-nonexistent.so.7"])
        assert.isDefined(loader)
        assert.isTrue(loader!.get("libibverbs.so.1")?.found)
        assert.isFalse(loader!.get("libeffect-rdma-nonexistent.so.7")?.found)
        const report = yield* Checks.run()
        assert.strictEqual(byId(report, "addon").status, "ok")
        assert.strictEqual(byId(report, "libraries").status, "ok")
      }))

    it.effect("an addon that fails with LibraryMissing makes the libraries check fail too", () =>
      Effect.gen(function*() {
        const missing = new RpmaBinding.NativeLoadError({
          reason: "LibraryMissing",
          path: "rpma_addon.node",
          library: "librpma.so.9",
          debianPackage: "librpma9",
          cause: undefined
        })
        const check = Checks.librariesCheck(yield* Checks.libraryFacts(Either.left(missing)))
        assert.strictEqual(check.status, "fail")
        assert.include(check.fixes, "apt-get install librpma9")
      }))
  })

  describe("text wrapping", () => {
    const report = Report.make([
      Report.check({
        id: "x",
        title: "addon",
        status: "fail",
        summary: "not loaded",
        details: [
          "first line of a message\nsecond line " + "word ".repeat(30).trim(),
          "a-very-long-path/".repeat(8)
        ],
        fixes: ["apt-get install " + "package ".repeat(20).trim()]
      })
    ], { size: 0, addresses: [] })

    for (const width of [50, 80, 120]) {
      it(`fits ${width} columns, keeps every word, and starts a new line at an embedded newline`, () => {
        const lines = Report.renderText(report, width).split("\n")
        for (const line of lines) {
          const word = line.trim()
          if (!word.includes(" ")) continue // a word longer than the line has a line of its own
          assert.isAtMost(line.length, width, line)
        }
        assert.isTrue(lines.some((l) => l.trim() === "first line of a message"), lines.join("\n"))
        const words = (text: string) => text.split(/\s+/).filter((w) => w !== "" && w !== "fix:")
        assert.deepStrictEqual(
          words(lines.slice(1, -2).join(" ")),
          words([...report.checks[0]!.details, ...report.checks[0]!.fixes].join(" "))
        )
      })
    }
  })

  it("--version is the package's version, from its package.json", async () => {
    const manifest = JSON.parse(readFileSync(join(packageRoot, "package.json"), "utf8")) as { version: string }
    assert.strictEqual(Cli.version, manifest.version)
    const printed: Array<string> = []
    const code = await Effect.runPromise(
      Cli.run(["--version"], { out: (t) => printed.push(t), err: (t) => printed.push(t), color: false })
    )
    assert.strictEqual(code, 0)
    assert.deepStrictEqual(printed, [manifest.version])
  })

  it("sizes", () => {
    assert.strictEqual(Size.parse("4096"), 4096)
    assert.strictEqual(Size.parse("64MiB"), 64 * 1024 ** 2)
    assert.strictEqual(Size.parse("1G"), 1024 ** 3)
    assert.strictEqual(Size.parse("1GB"), 1e9)
    assert.strictEqual(Size.parse("1.5 GiB"), 1.5 * 1024 ** 3)
    assert.isUndefined(Size.parse("lots"))
    assert.isUndefined(Size.parse("-1MiB"))
    assert.strictEqual(Size.format(64 * 1024 ** 2), "64 MiB")
    assert.strictEqual(Size.format(1.5 * 1024 ** 3), "1.5 GiB")
    assert.strictEqual(Size.format(100), "100 bytes")
  })

  describe("the bin", () => {
    // Not spawnSync: the three runs overlap (tests run concurrently).
    const doctor = (...args: Array<string>) =>
      new Promise<{ status: number | null; stdout: string; stderr: string }>((resolve, reject) => {
        const child = spawn(...childNode(["--import", "tsx", join(packageRoot, "bin", "doctor.ts"), ...args]), {
          cwd: packageRoot,
          stdio: ["ignore", "pipe", "pipe"],
          timeout: 60_000
        })
        let stdout = ""
        let stderr = ""
        child.stdout.setEncoding("utf8").on("data", (chunk: string) => stdout += chunk)
        child.stderr.setEncoding("utf8").on("data", (chunk: string) => stderr += chunk)
        child.on("error", reject)
        child.on("close", (status) => resolve({ status, stdout, stderr }))
      })

    it("--json prints the report as JSON; exit code 1 since a check failed", async () => {
      const run = await doctor("--json", "--size", "16MiB", "--address", "127.0.0.1")
      assert.strictEqual(run.status, 1, run.stderr)
      const report = JSON.parse(run.stdout) as Report.Report & { readonly schemaVersion: number }
      assert.strictEqual(report.schemaVersion, 1)
      assert.isFalse(report.ok)
      assert.deepStrictEqual(report.options, { size: 16 * 1024 ** 2, addresses: ["127.0.0.1"] })
      assert.deepStrictEqual(report.checks.map((c) => c.id), [
        "effect",
        "addon",
        "libraries",
        "devices",
        "address",
        "memlock"
      ])
      for (const c of report.checks) {
        assert.hasAllKeys(c, ["id", "title", "status", "summary", "details", "fixes", "data"])
      }
      assert.strictEqual(report.checks.find((c) => c.id === "devices")?.summary, "no RDMA devices found")
    }, 60_000)

    it("text: a line per check, the fixes, and the tally", async () => {
      const run = await doctor()
      assert.strictEqual(run.status, 1, run.stderr)
      assert.match(run.stdout, /^ok {4}addon/m)
      assert.match(run.stdout, /^fail {2}devices +no RDMA devices found/m)
      assert.include(run.stdout, "fix: ")
      assert.match(run.stdout, /^1 failed, \d+ warnings?, \d+ ok/m)
    }, 60_000)

    it("an invalid --size is exit code 2 (usage), with the reason on stderr", async () => {
      const run = await doctor("--size", "lots")
      assert.strictEqual(run.status, 2)
      assert.include(run.stderr, "not a size: lots")
      assert.strictEqual(run.stdout, "")
    }, 60_000)

    it("a malformed --address is exit code 2 (usage), before any check runs", async () => {
      const run = await doctor("--address", "nonsense")
      assert.strictEqual(run.status, 2)
      assert.include(run.stderr, "--address: not an IPv4 or IPv6 address: nonsense")
      assert.strictEqual(run.stdout, "")
    }, 60_000)

    it("an unknown flag is exit code 2; --help is exit code 0, without colour codes when piped", async () => {
      const unknown = await doctor("--frobnicate")
      assert.strictEqual(unknown.status, 2)
      assert.include(unknown.stderr, "--frobnicate")
      const help = await doctor("--help")
      assert.strictEqual(help.status, 0, help.stderr)
      assert.include(help.stdout, "usage: effect-rdma-doctor")
      assert.notInclude(help.stdout, "\x1b[")
    }, 60_000)
  })
})
