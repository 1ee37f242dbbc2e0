// Bundles the programs run in the Soft-RoCE VM (the examples, the soak, the doctor, the device benchmarks) into single ESM
// files under packages/native/.vm-build/, on the host, with the esbuild that tsx already brings.
// Under qemu's emulation tsx compiles the sources at start-up for over a minute a process (several
// when the host is busy); a bundle starts in seconds. The bundles stay under packages/native, so
// the addon is still found from the package root. Names on the command line bundle only those
// (a device test bundles its own child program, so that it never runs a stale one).
import { readFileSync, realpathSync } from "node:fs"
import { createRequire } from "node:module"
import { dirname, join } from "node:path"
import { fileURLToPath, pathToFileURL } from "node:url"

const root = join(dirname(fileURLToPath(import.meta.url)), "..")
const esbuild = createRequire(realpathSync(join(root, "node_modules", "tsx", "package.json")))("esbuild")

const programs = {
  soak: join(root, "scripts", "soak.ts"),
  doctor: join(root, "packages", "native", "src", "doctor", "bin.ts"),
  memlock: join(root, "packages", "native", "test-device", "programs", "memlock.ts"),
  // The device benchmarks (bench/device.sh): compiled as users run them, without tsx's `__name`
  // wrapper around every closure (it multiplied a write's instructions by five on the host).
  "native-bench": join(root, "bench", "native.ts"),
  "write-bench": join(root, "bench", "write.ts"),
  // Issue 20: librdmacm's verbs API path against bench/c/cm_bench.c.
  "cm-bench": join(root, "bench", "cm.ts"),
  // @effect/rpc over RDMA against the same call over TCP (issue 21).
  "rpc-bench": join(root, "bench", "rpc.ts"),
  // What isolating clients costs: Listener.serve's default against isolation: "shared" (issue 34).
  "isolation-bench": join(root, "bench", "isolation.ts"),
  // Polling against waiting, latency rows against C (issue 35).
  "polling-bench": join(root, "bench", "polling.ts"),
  // An @effect/cluster entity call over RdmaCluster against cluster's socket runner over TCP (issue 33).
  "cluster-bench": join(root, "bench", "cluster.ts"),
  // scripts/test's smoke tests: the examples as the README runs them, started without tsx.
  "replicated-log": join(root, "examples", "replicated-log.ts"),
  "message-service": join(root, "examples", "message-service.ts"),
  "kv-store": join(root, "examples", "kv-store.ts")
}

// An example finds its fixtures (and kv-store its own source, to start a child process with tsx)
// from its import.meta.url: in a bundle that is the bundle's, so each example keeps its source's.
const examplesKeepTheirUrl = {
  name: "examples-keep-their-url",
  setup(build) {
    build.onLoad({ filter: /[\\/]examples[\\/][^\\/]+\.ts$/ }, (args) => ({
      contents: readFileSync(args.path, "utf8").replaceAll(
        "import.meta.url",
        JSON.stringify(pathToFileURL(args.path).href)
      ),
      loader: "ts"
    }))
  }
}
// better-sqlite3 finds its addon from its own file (through `bindings`, which reads __filename):
// it stays a module of its own, imported by its absolute path, where the checkout installed it.
const betterSqliteOutside = {
  name: "better-sqlite3-outside",
  setup(build) {
    build.onResolve({ filter: /^better-sqlite3$/ }, (args) => ({
      path: createRequire(join(args.resolveDir, "index.js")).resolve("better-sqlite3"),
      external: true
    }))
  }
}
const names = process.argv.slice(2)
for (const name of names) {
  if (!(name in programs)) throw new Error(`no program ${name}: one of ${Object.keys(programs).join(", ")}`)
}

await esbuild.build({
  entryPoints: names.length === 0 ? programs : Object.fromEntries(names.map((name) => [name, programs[name]])),
  outdir: join(root, "packages", "native", ".vm-build"),
  outExtension: { ".js": ".mjs" },
  bundle: true,
  platform: "node",
  format: "esm",
  target: "node20",
  sourcemap: "external",
  logLevel: "warning",
  plugins: [examplesKeepTheirUrl, betterSqliteOutside],
  // The effect guard reads core's package.json beside itself (the supported range is said once, as
  // core's peer dependency): it stays a module of its own, found from packages/native/node_modules.
  external: ["@effect-rdma/core/effect-guard"],
  // For the CommonJS inside dependencies.
  banner: {
    js: "import { createRequire as __vmRequire } from 'node:module'; const require = __vmRequire(import.meta.url);"
  }
})
