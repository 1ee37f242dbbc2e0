/**
 * What the doctor reads from the host besides the addon: /proc, /sys, the dynamic loader,
 * dpkg-query and the network interfaces. Every read is best effort: what cannot be read is `undefined`, never an error, so
 * that a check can say it could not find out.
 *
 * @since 0.1.0
 */
import * as Effect from "effect/Effect"
import { execFile } from "node:child_process"
import { readdir, readFile } from "node:fs/promises"
import { networkInterfaces } from "node:os"
import { basename, dirname, join } from "node:path"

// Node's own fs and child_process, not @effect/platform's services: the doctor ships with the
// package, and a user of the native driver should not need a platform layer (and its
// dependencies) to run it.
const readText = (path: string): Effect.Effect<string | undefined> =>
  Effect.tryPromise(() => readFile(path, "utf8")).pipe(Effect.orElseSucceed(() => undefined))

const readDirectory = (path: string): Effect.Effect<Array<string> | undefined> =>
  Effect.tryPromise(() => readdir(path)).pipe(
    Effect.map((names) => names.sort()),
    Effect.orElseSucceed(() => undefined)
  )

/** Runs a program and gives its standard output, whatever its exit code; fails if it cannot run. */
const commandOutput = (file: string, args: ReadonlyArray<string>): Effect.Effect<string, Error> =>
  Effect.async<string, Error>((resume, signal) => {
    execFile(file, args, { encoding: "utf8", signal }, (error, stdout) => {
      // An exit code other than 0 still has output; only a program that did not run is a failure.
      if (error !== null && typeof (error as { readonly code?: unknown }).code !== "number") resume(Effect.fail(error))
      else resume(Effect.succeed(stdout))
    })
  })

/**
 * A resource limit: a number of bytes, or unlimited.
 *
 * @since 0.1.0
 * @category models
 */
export type Limit = number | "unlimited"

/**
 * What decides how much memory this process can register: RLIMIT_MEMLOCK and whether the kernel
 * lets it pin past that (CAP_IPC_LOCK, which the kernel checks in the initial user namespace).
 *
 * @since 0.1.0
 * @category models
 */
export interface MemlockFacts {
  readonly soft: Limit | undefined
  readonly hard: Limit | undefined
  readonly capIpcLock: boolean
  /** False inside a user namespace (a rootless container): there CAP_IPC_LOCK does not count. */
  readonly initialUserNamespace: boolean
  readonly uid: number | undefined
}

const CAP_IPC_LOCK = 14n

const parseLimit = (text: string): Limit => text === "unlimited" ? "unlimited" : Number(text)

/**
 * RLIMIT_MEMLOCK (soft and hard) from /proc/self/limits, and the capabilities from /proc/self/status.
 *
 * @since 0.1.0
 * @category facts
 */
export const memlockFacts: Effect.Effect<MemlockFacts> = Effect.gen(function*() {
  const limits = (yield* readText("/proc/self/limits")) ?? ""
  const status = (yield* readText("/proc/self/status")) ?? ""
  const uidMap = (yield* readText("/proc/self/uid_map")) ?? ""
  const row = /^Max locked memory\s+(\S+)\s+(\S+)/m.exec(limits)
  const capEff = /^CapEff:\s*([0-9a-f]+)/m.exec(status)
  const uid = /^Uid:\s*\d+\s+(\d+)/m.exec(status)
  return {
    soft: row === null ? undefined : parseLimit(row[1]!),
    hard: row === null ? undefined : parseLimit(row[2]!),
    capIpcLock: capEff !== null && ((BigInt(`0x${capEff[1]}`) >> CAP_IPC_LOCK) & 1n) === 1n,
    // The initial namespace maps every id to itself: "0 0 4294967295".
    initialUserNamespace: uidMap.trim() === "" || /^\s*0\s+0\s+4294967295\s*$/.test(uidMap),
    uid: uid === null ? undefined : Number(uid[1])
  }
})

/**
 * A shared library mapped into this process.
 *
 * @since 0.1.0
 * @category models
 */
export interface MappedLibrary {
  /** The path as mapped: the real file, e.g. /usr/lib/x86_64-linux-gnu/libibverbs.so.1.14.44.0. */
  readonly path: string
  /** What follows ".so." in the file's name: "1.14.44.0", or just the soname's "0". */
  readonly version: string
}

/**
 * librpma, librdmacm and libibverbs as mapped into this process (after the addon is loaded),
 * from /proc/self/maps.
 *
 * @since 0.1.0
 * @category facts
 */
export const mappedLibraries: Effect.Effect<
  Partial<Record<"librpma" | "librdmacm" | "libibverbs", MappedLibrary>>
> = Effect.map(readText("/proc/self/maps"), (maps) => {
  const found: Partial<Record<"librpma" | "librdmacm" | "libibverbs", MappedLibrary>> = {}
  for (const line of (maps ?? "").split("\n")) {
    const path = line.slice(line.indexOf("/"))
    const match = /\/(librpma|librdmacm|libibverbs)\.so\.([\d.]+)$/.exec(path)
    if (line.includes("/") && match !== null) found[match[1] as "librpma"] = { path, version: match[2]! }
  }
  return found
})

/**
 * What the dynamic loader does with a soname: `found` when dlopen finds it (LD_LIBRARY_PATH, the
 * ldconfig cache, the default directories: where the addon's own load looks), with the file
 * `ldconfig -p` lists for it when it lists one.
 *
 * @since 0.1.0
 * @category models
 */
export interface LoaderResult {
  readonly found: boolean
  readonly path?: string | undefined
}

// In a child process: a library's constructors run on dlopen, and the doctor must survive them.
// process.dlopen of a library that is not an addon fails after loading it ("did not self-register");
// only "cannot open shared object file" means the loader did not find it.
const dlopenProbe = `const found = {}
for (const soname of process.argv.slice(1)) {
  try { process.dlopen({ exports: {} }, soname); found[soname] = true }
  catch (e) { found[soname] = !/cannot open shared object file/.test(String(e && e.message)) }
}
process.stdout.write(JSON.stringify(found))`

/**
 * Asks the dynamic loader for each soname (dlopen in a child process), and `ldconfig -p` for its
 * file. `undefined` when the child cannot run.
 *
 * @since 0.1.0
 * @category facts
 */
export const loaderLibraries = (
  sonames: ReadonlyArray<string>
): Effect.Effect<Map<string, LoaderResult> | undefined> =>
  Effect.gen(function*() {
    const out = yield* commandOutput(process.execPath, ["-e", dlopenProbe, ...sonames])
    const found = yield* Effect.try(() => JSON.parse(out) as Record<string, boolean>)
    const cache = yield* commandOutput("ldconfig", ["-p"]).pipe(
      Effect.orElse(() => commandOutput("/sbin/ldconfig", ["-p"])),
      Effect.orElseSucceed(() => "")
    )
    const paths = new Map<string, string>()
    // "	libibverbs.so.1 (libc6,x86-64) => /lib/x86_64-linux-gnu/libibverbs.so.1"
    for (const match of cache.matchAll(/^\s*(\S+) \(([^)]*)\) => (\S+)$/gm)) {
      const is64 = match[2]!.includes("64")
      if (!paths.has(match[1]!) && is64 === (process.arch === "x64" || process.arch === "arm64")) {
        paths.set(match[1]!, match[3]!)
      }
    }
    return new Map(sonames.map((soname) => [soname, { found: found[soname] === true, path: paths.get(soname) }]))
  }).pipe(Effect.timeout("10 seconds"), Effect.orElseSucceed(() => undefined))

/**
 * The user-space providers (drivers) libibverbs can load, from the `libibverbs/` directory next
 * to libibverbs: "rxe", "mlx5", ... `undefined` when the directory cannot be read.
 *
 * @since 0.1.0
 * @category facts
 */
export const verbsProviders = (libibverbs: string): Effect.Effect<Array<string> | undefined> =>
  Effect.map(readDirectory(join(dirname(libibverbs), "libibverbs")), (files) =>
    files?.flatMap((file) => {
      const match = /^lib(.+)-rdmav\d+\.so$/.exec(basename(file))
      return match === null ? [] : [match[1]!]
    }))

/**
 * An installed (or known) Debian package.
 *
 * @since 0.1.0
 * @category models
 */
export interface DebianPackage {
  readonly version: string
  readonly installed: boolean
}

/**
 * `dpkg-query -W` for `names`: the packages dpkg knows, by name (without the architecture).
 * `undefined` when dpkg-query cannot run (not a Debian-like system).
 *
 * @since 0.1.0
 * @category facts
 */
export const debianPackages = (
  names: ReadonlyArray<string>
): Effect.Effect<Map<string, DebianPackage> | undefined> =>
  commandOutput("dpkg-query", ["-W", "-f", "${Package}\\t${Version}\\t${db:Status-Abbrev}\\n", ...names]).pipe(
    // dpkg-query exits 1 when some name is unknown and still prints the others.
    Effect.map((out) => {
      const found = new Map<string, DebianPackage>()
      for (const line of out.split("\n")) {
        const [name, version, status] = line.split("\t")
        if (name === undefined || version === undefined || name === "") continue
        found.set(name.replace(/:.*$/, ""), { version, installed: (status ?? "").startsWith("ii") })
      }
      return found
    }),
    Effect.timeout("10 seconds"),
    Effect.orElseSucceed(() => undefined)
  )

/**
 * An RDMA device as the kernel shows it in /sys/class/infiniband, with the network interface
 * behind each port (RoCE and iWARP devices; none for InfiniBand).
 *
 * @since 0.1.0
 * @category models
 */
export interface KernelDevice {
  readonly name: string
  readonly ports: ReadonlyArray<{ readonly port: number; readonly netdev?: string | undefined }>
}

/**
 * The devices in /sys/class/infiniband; `undefined` when the directory does not exist (no RDMA
 * support loaded in the kernel, or not visible in this container).
 *
 * @since 0.1.0
 * @category facts
 */
export const kernelDevices: Effect.Effect<Array<KernelDevice> | undefined> = Effect.gen(
  function*() {
    const root = "/sys/class/infiniband"
    const names = yield* readDirectory(root)
    if (names === undefined) return undefined
    return yield* Effect.forEach(names, (name) =>
      Effect.gen(function*() {
        const ports = (yield* readDirectory(join(root, name, "ports"))) ?? []
        return {
          name,
          ports: yield* Effect.forEach(ports, (port) =>
            Effect.map(
              readText(join(root, name, "ports", port, "gid_attrs", "ndevs", "0")),
              (netdev) => ({ port: Number(port), netdev: netdev?.trim() || undefined })
            ))
        }
      }))
  }
)

/**
 * A network interface and its addresses.
 *
 * @since 0.1.0
 * @category models
 */
export interface NetworkInterface {
  readonly name: string
  readonly internal: boolean
  readonly addresses: ReadonlyArray<string>
}

/**
 * This host's network interfaces (os.networkInterfaces).
 *
 * @since 0.1.0
 * @category facts
 */
export const interfaces: Effect.Effect<Array<NetworkInterface>> = Effect.sync(() =>
  Object.entries(networkInterfaces()).map(([name, infos]) => ({
    name,
    internal: (infos ?? []).every((info) => info.internal),
    addresses: (infos ?? []).map((info) => info.address)
  }))
)
