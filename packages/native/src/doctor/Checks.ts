/**
 * The doctor's checks: is the addon loaded, which libraries, which RDMA devices and in what state,
 * which addresses they answer at, can this process register the memory it needs, and is forking
 * safe with registered memory. Each says what is wrong and what to do.
 *
 * @since 0.1.0
 */
import { RdmaError } from "@effect-rdma/core"
import * as EffectGuard from "@effect-rdma/core/effect-guard"
import * as Effect from "effect/Effect"
import * as Either from "effect/Either"
import { existsSync, readFileSync } from "node:fs"
import { createRequire } from "node:module"
import * as Load from "../internal/load.js"
import * as NativeDriver from "../NativeDriver.js"
import * as RpmaBinding from "../RpmaBinding.js"
import * as Report from "./Report.js"
import * as Size from "./Size.js"
import * as System from "./System.js"

/**
 * What to check.
 *
 * @since 0.1.0
 * @category models
 */
export interface Options {
  /** Addresses a device should answer at (`--address`), each checked with getIbvContext. */
  readonly addresses?: ReadonlyArray<string> | undefined
  /** Bytes this process means to register (`--size`); default 64 MiB. */
  readonly size?: number | undefined
  /** The addon to load; default {@link RpmaBinding.defaultPath}. */
  readonly addonPath?: string | undefined
}

/**
 * The default of `--size`.
 *
 * @since 0.1.0
 * @category constants
 */
export const defaultSize: number = 64 * 1024 ** 2

const buildCommand = Load.rebuildHelp
const devPackages = Load.buildPackages

const message = (cause: unknown): string => cause instanceof Error ? cause.message : String(cause)

const nodeAddonApiVersion = (): string | undefined => {
  try {
    const manifest = createRequire(import.meta.url).resolve("node-addon-api/package.json")
    return JSON.parse(readFileSync(manifest, "utf8")).version
  } catch {
    return undefined
  }
}

/** The doctor's functions are in builds from this version on; an older build has none. */
const hasDoctorFunctions = (binding: RpmaBinding.Binding): boolean =>
  typeof binding.ibvDevices === "function" && typeof binding.ibvForkStatus === "function" &&
  typeof binding.ibvContextDeviceName === "function" && typeof binding.buildInfo === "function"

// ---------------------------------------------------------------------------------------------
// addon

/**
 * The addon: loaded from where, built for which N-API; or which {@link RpmaBinding.NativeLoadError}
 * and what fixes it.
 *
 * @since 0.1.0
 * @category checks
 */
export const addonCheck = (
  path: string,
  loaded: Either.Either<RpmaBinding.Binding, RpmaBinding.NativeLoadError>
): Report.Check => {
  const title = "addon"
  const versions = {
    nodeAddonApi: nodeAddonApiVersion(),
    nodeNapi: Number(process.versions.napi),
    node: process.version,
    nodeAbi: process.versions.modules,
    builtAbi: Load.builtAbi(path)
  }
  if (Either.isRight(loaded)) {
    const binding = loaded.right
    if (!hasDoctorFunctions(binding)) {
      return Report.check({
        id: "addon",
        title,
        status: "warn",
        summary: `loaded ${path}, but it is an older build without the doctor's device queries`,
        details: ["devices, ports and fork safety cannot be checked through libibverbs with this build"],
        fixes: [buildCommand],
        data: { loaded: true, path, ...versions }
      })
    }
    const { napiVersion } = binding.buildInfo()
    return Report.check({
      id: "addon",
      title,
      status: "ok",
      summary: `loaded ${path}`,
      details: [
        `built for N-API ${napiVersion} with node-addon-api ${versions.nodeAddonApi ?? "(version unknown)"}` +
        ` and Node.js ABI ${versions.builtAbi ?? "(not recorded)"}; ` +
        `Node.js ${versions.node} provides N-API ${versions.nodeNapi}, ABI ${versions.nodeAbi}`
      ],
      data: { loaded: true, path, napiVersion, ...versions }
    })
  }
  const error = loaded.left
  const fixes: Array<string> = []
  switch (error.reason) {
    case "AddonNotBuilt":
      fixes.push(
        `install the headers and a compiler: sudo apt-get install ${devPackages}`,
        buildCommand
      )
      break
    case "AbiMismatch":
      fixes.push(`with this Node.js, ${buildCommand}`)
      break
    case "LibraryMissing":
      fixes.push(
        error.debianPackage === undefined ?
          `install the package that provides ${error.library ?? "the missing library"}` :
          `apt-get install ${error.debianPackage}`
      )
      break
    case "Bundled":
      fixes.push("mark @effect-rdma/native external in your bundler (esbuild: `--external:@effect-rdma/native`)")
      break
    case "Unknown":
      fixes.push(buildCommand)
      break
  }
  return Report.check({
    id: "addon",
    title,
    status: "fail",
    summary: `not loaded: NativeLoadError ${error.reason}`,
    details: [
      error.message,
      existsSync(path) ? `${path} exists` : `${path} does not exist`,
      "NativeDriver.layer fails with this error; the simulated driver (@effect-rdma/testing) still works"
    ],
    fixes,
    data: {
      loaded: false,
      path,
      reason: error.reason,
      library: error.library,
      debianPackage: error.debianPackage,
      error: error.message,
      ...versions
    }
  })
}

// ---------------------------------------------------------------------------------------------
// libraries

const debianNames = ["librpma0", "librpma1", "librdmacm1", "libibverbs1", "ibverbs-providers", "rdma-core"]

/**
 * Facts for {@link librariesCheck}.
 *
 * @since 0.1.0
 * @category models
 */
export interface LibraryFacts {
  readonly mapped: Partial<Record<"librpma" | "librdmacm" | "libibverbs", System.MappedLibrary>>
  /** What the dynamic loader finds for each soname; `undefined` when it could not be asked. */
  readonly loader: ReadonlyMap<string, System.LoaderResult> | undefined
  /** The library the addon failed to load for (NativeLoadError `LibraryMissing`), if that is why. */
  readonly missing?: { readonly library: string; readonly debianPackage?: string | undefined } | undefined
  readonly debian: ReadonlyMap<string, System.DebianPackage> | undefined
  readonly providers: ReadonlyArray<string> | undefined
}

/** The sonames the addon can link, by library: upstream librpma's .so.1, Debian 12's .so.0. */
const sonames = {
  librpma: ["librpma.so.1", "librpma.so.0"],
  librdmacm: ["librdmacm.so.1"],
  libibverbs: ["libibverbs.so.1"]
} as const

/**
 * Reads the facts for {@link librariesCheck} (after the addon is loaded, so the libraries are
 * mapped), given why the addon did not load, if it did not.
 *
 * @since 0.1.0
 * @category facts
 */
export const libraryFacts = (
  loaded: Either.Either<unknown, RpmaBinding.NativeLoadError>
): Effect.Effect<LibraryFacts> =>
  Effect.gen(function*() {
    const mapped = yield* System.mappedLibraries
    const loader = yield* System.loaderLibraries(Object.values(sonames).flat())
    const debian = yield* System.debianPackages(debianNames)
    const libibverbs = mapped.libibverbs?.path ?? loader?.get("libibverbs.so.1")?.path ??
      `/usr/lib/${process.arch === "arm64" ? "aarch64" : "x86_64"}-linux-gnu/libibverbs.so.1`
    const providers = yield* System.verbsProviders(libibverbs)
    const error = Either.isLeft(loaded) ? loaded.left : undefined
    const missing = error?.reason === "LibraryMissing" && error.library !== undefined ?
      { library: error.library, debianPackage: error.debianPackage } :
      undefined
    return { mapped, loader, missing, debian, providers }
  })

/**
 * librpma, librdmacm, libibverbs (rdma-core) and the verbs providers: which versions, and whether
 * anything the native driver needs is missing.
 *
 * @since 0.1.0
 * @category checks
 */
export const librariesCheck = (facts: LibraryFacts): Report.Check => {
  const { debian, loader, mapped, missing, providers } = facts
  const installed = (name: string) => debian?.get(name)?.installed === true ? debian.get(name) : undefined
  const rpmaPackage = installed("librpma1") !== undefined ? "librpma1" : "librpma0"
  // rdma-core names its libraries <name>.so.<soname>.<abi>.<release>: libibverbs.so.1.14.44.0.
  const release = (lib: System.MappedLibrary | undefined) => {
    const parts = lib?.version.split(".") ?? []
    return parts.length >= 4 ? parts.slice(2).join(".") : undefined
  }
  const versions = {
    librpma: installed(rpmaPackage)?.version.replace(/-[^-]*$/, "") ??
      (mapped.librpma === undefined ? undefined : `soname ${mapped.librpma.version}`),
    rdmaCore: release(mapped.libibverbs) ?? installed("rdma-core")?.version.replace(/-[^-]*$/, "") ??
      installed("libibverbs1")?.version.replace(/-[^-]*$/, "")
  }
  const details: Array<string> = []
  const fixes: Array<string> = []
  let status: Report.Status = "ok"
  const worse = (s: Report.Status) => {
    if (s === "fail" || status === "ok") status = s
  }
  const libraries = [["librpma", rpmaPackage], ["librdmacm", "librdmacm1"], ["libibverbs", "libibverbs1"]] as const
  for (const [lib, pkg] of libraries) {
    const where = mapped[lib]
    const dpkg = installed(pkg)
    const dpkgText = dpkg === undefined ? "" : `Debian ${pkg} ${dpkg.version}`
    const dpkgNote = dpkgText === "" ? "" : ` (${dpkgText})`
    const found = sonames[lib].flatMap((soname) => {
      const result = loader?.get(soname)
      return result?.found === true ? [result.path === undefined ? soname : `${soname} → ${result.path}`] : []
    })
    const needed = missing?.library.startsWith(`${lib}.so`) === true ? missing : undefined
    if (needed !== undefined) {
      // The addon's own load is the authority: dpkg's records or another soname do not help it.
      details.push(
        `${lib}: the addon needs ${needed.library}, which the dynamic loader does not find` +
          (found.length === 0 ? "" : `; it finds ${found.join(", ")}, which the addon was not built for`) + dpkgNote
      )
      fixes.push(
        needed.debianPackage === undefined ?
          `install the package that provides ${needed.library}` :
          `apt-get install ${needed.debianPackage}`
      )
      if (found.length > 0) {
        fixes.push(
          `or build the addon against the installed one: sudo apt-get install ${devPackages}, then ${buildCommand}`
        )
      }
      worse("fail")
    } else if (where !== undefined) {
      details.push(`${lib}: ${where.path}${dpkgNote}`)
    } else if (loader !== undefined) {
      if (found.length > 0) {
        details.push(`${lib}: ${found.join(", ")} (found by the dynamic loader)${dpkgNote}`)
      } else {
        details.push(
          `${lib}: the dynamic loader finds none of ${sonames[lib].join(", ")}` +
            (dpkg === undefined ? "" : `, though dpkg lists ${dpkgText}`)
        )
        fixes.push(`apt-get install ${pkg}`)
        worse("fail")
      }
    } else if (dpkg !== undefined) {
      details.push(`${lib}: ${dpkgText} (not loaded: the addon is not)`)
    } else if (debian !== undefined) {
      details.push(`${lib}: not installed`)
      fixes.push(`apt-get install ${pkg}`)
      worse("fail")
    } else {
      details.push(`${lib}: not loaded, and dpkg-query is not available to tell whether it is installed`)
      worse("warn")
    }
  }
  if (providers !== undefined) {
    details.push(
      providers.length === 0 ?
        "libibverbs providers: none" :
        `libibverbs providers: ${providers.length}, ` +
        (providers.includes("rxe") ? "rxe (Soft-RoCE) among them" : "without rxe (Soft-RoCE)")
    )
  }
  const providersPackage = debian?.get("ibverbs-providers")
  if ((providers !== undefined && providers.length === 0) || (debian !== undefined && !providersPackage?.installed)) {
    details.push("without a provider (user-space driver) libibverbs lists no device, even when the kernel has one")
    fixes.push("apt-get install ibverbs-providers")
    worse("warn")
  }
  if (debian === undefined) details.push("dpkg-query is not available: Debian package versions unknown")
  return Report.check({
    id: "libraries",
    title: "libraries",
    status,
    summary: `librpma ${versions.librpma ?? "(version unknown)"}, rdma-core ${
      versions.rdmaCore ?? "(version unknown)"
    }`,
    details,
    fixes,
    data: {
      ...versions,
      mapped,
      loader: loader === undefined ? undefined : Object.fromEntries(loader),
      missing,
      debian: debian === undefined ? undefined : Object.fromEntries(debian),
      providers
    }
  })
}

// ---------------------------------------------------------------------------------------------
// devices

/**
 * Facts for {@link devicesCheck}. `verbs` is libibverbs' list (through the addon), or the errno
 * message when listing failed, or `undefined` without the addon.
 *
 * @since 0.1.0
 * @category models
 */
export interface DeviceFacts {
  readonly verbs:
    | { readonly _tag: "Listed"; readonly devices: ReadonlyArray<RpmaBinding.IbvDeviceInfo> }
    | { readonly _tag: "Failed"; readonly errno: number | undefined; readonly message: string }
    | undefined
  readonly kernel: ReadonlyArray<System.KernelDevice> | undefined
  readonly interfaces: ReadonlyArray<System.NetworkInterface>
}

const { ENOSYS } = RdmaError.Errno

/**
 * Reads the facts for {@link devicesCheck}.
 *
 * @since 0.1.0
 * @category facts
 */
export const deviceFacts = (
  binding: RpmaBinding.Binding | undefined
): Effect.Effect<DeviceFacts> =>
  Effect.gen(function*() {
    const verbs: DeviceFacts["verbs"] = binding === undefined || !hasDoctorFunctions(binding) ?
      undefined :
      yield* Effect
        .try(() => binding.ibvDevices()).pipe(
          Effect.match({
            onSuccess: (devices) => ({ _tag: "Listed" as const, devices }),
            onFailure: ({ error }) => {
              const errno = (error as { readonly errno?: unknown }).errno
              return {
                _tag: "Failed" as const,
                errno: typeof errno === "number" ? errno : undefined,
                message: message(error)
              }
            }
          })
        )
    return { verbs, kernel: yield* System.kernelDevices, interfaces: yield* System.interfaces }
  })

/**
 * The interface a Soft-RoCE device could be bound to: the first one up with an IPv4 address,
 * not the loopback.
 */
const softRoceCandidate = (interfaces: ReadonlyArray<System.NetworkInterface>): string =>
  interfaces.find((i) => !i.internal && i.addresses.some((a) => a.includes(".")))?.name ?? "<interface>"

const softRoceFixes = (interfaces: ReadonlyArray<System.NetworkInterface>): Array<string> => {
  const netdev = softRoceCandidate(interfaces)
  return [
    "for Soft-RoCE (RDMA over any Ethernet interface, no RDMA hardware): `modprobe rdma_rxe`, then " +
    `\`rdma link add rxe0 type rxe netdev ${netdev}\` (as root; \`rdma\` is in iproute2, the rxe provider in ` +
    "ibverbs-providers)",
    "for an RDMA NIC: load its kernel driver (e.g. mlx5_ib) and install ibverbs-providers",
    "in a container: load the module on the host and pass the devices in (--device /dev/infiniband, plus " +
    "/sys/class/infiniband)"
  ]
}

/** The addresses a device answers at: those of the network interfaces behind its ports (RoCE, iWARP). */
const deviceAddresses = (
  name: string,
  kernel: ReadonlyArray<System.KernelDevice> | undefined,
  interfaces: ReadonlyArray<System.NetworkInterface>
): Array<{ netdev: string; addresses: ReadonlyArray<string> }> =>
  (kernel?.find((d) => d.name === name)?.ports ?? []).flatMap((p) =>
    p.netdev === undefined ? [] : [{
      netdev: p.netdev,
      addresses: interfaces.find((i) => i.name === p.netdev)?.addresses ?? []
    }]
  )

/**
 * The RDMA devices: which, each port's state and active MTU, node GUID, and the network interface
 * (and so the addresses) behind it. No device is a failure, with what it means and how to add one.
 *
 * @since 0.1.0
 * @category checks
 */
export const devicesCheck = (facts: DeviceFacts): Report.Check => {
  const { interfaces, kernel, verbs } = facts
  const title = "devices"
  const kernelNames = kernel?.map((d) => d.name) ?? []
  const noDevice = (summary: string, details: ReadonlyArray<string>) =>
    Report.check({
      id: "devices",
      title,
      status: "fail",
      summary,
      details: [
        ...details,
        "without a device the native driver cannot register memory or connect: getIbvContext fails with " +
        "RpmaProviderError at every address; the simulated driver (@effect-rdma/testing) works without one"
      ],
      fixes: softRoceFixes(interfaces),
      data: { devices: [], kernelDevices: kernelNames, verbs: verbs?._tag === "Failed" ? verbs : undefined }
    })
  if (verbs === undefined) {
    // Without the addon: only what the kernel shows.
    if (kernelNames.length === 0) {
      return noDevice("no RDMA devices found", [
        kernel === undefined ?
          "/sys/class/infiniband does not exist: no RDMA support loaded in the kernel" :
          "/sys/class/infiniband is empty",
        "(the addon is not loaded, so libibverbs was not asked)"
      ])
    }
    return Report.check({
      id: "devices",
      title,
      status: "warn",
      summary: `the kernel has ${kernelNames.join(", ")}; ports not checked`,
      details: ["the addon is not loaded (or is an older build), so libibverbs was not asked for port states"],
      fixes: ["load the addon (see the addon check)"],
      data: { devices: [], kernelDevices: kernelNames }
    })
  }
  if (verbs._tag === "Failed" || verbs.devices.length === 0) {
    const why = verbs._tag === "Failed" ?
      verbs.errno === ENOSYS ?
        `libibverbs: no RDMA support in the kernel (${verbs.message})` :
        `libibverbs could not list devices: ${verbs.message}` :
      "libibverbs lists no device"
    if (kernelNames.length > 0) {
      return Report.check({
        id: "devices",
        title,
        status: "fail",
        summary: `the kernel has ${kernelNames.join(", ")}, but libibverbs lists none`,
        details: [why, "libibverbs needs a user-space provider for each kind of device"],
        fixes: ["apt-get install ibverbs-providers", "check /etc/libibverbs.d for the device's driver"],
        data: { devices: [], kernelDevices: kernelNames }
      })
    }
    return noDevice("no RDMA devices found", [
      why,
      kernel === undefined ? "/sys/class/infiniband does not exist" : "/sys/class/infiniband is empty"
    ])
  }
  const details: Array<string> = []
  const fixes: Array<string> = []
  let status: Report.Status = "ok"
  const devices = verbs.devices.map((device) => {
    const behind = deviceAddresses(device.name, kernel, interfaces)
    const ports = device.ports.map((port) =>
      port.error !== undefined ?
        `port ${port.port}: ${port.error}` :
        `port ${port.port} ${(port.state ?? "?").replace(/^PORT_/, "")}, MTU ${port.activeMtu}, ${port.linkLayer}`
    )
    const netdevs = behind.map((b) => `${b.netdev} (${b.addresses.join(", ") || "no address"})`)
    details.push(
      `${device.name}: ${device.error ?? ports.join("; ")}; node GUID ${device.nodeGuid}` +
        (netdevs.length === 0 ? "" : `; on ${[...new Set(netdevs)].join(", ")}`)
    )
    const active = device.ports.some((p) => p.state === "PORT_ACTIVE")
    if (device.error !== undefined || !active) {
      status = "warn"
      const netdev = behind[0]?.netdev
      fixes.push(
        device.error !== undefined ?
          `${device.name} cannot be opened (${device.error}): check the permissions of /dev/infiniband/uverbs*` :
          netdev !== undefined ?
          `${device.name} has no active port: bring ${netdev} up (\`ip link set ${netdev} up\`)` :
          `${device.name} has no active port: check the cable and, on InfiniBand, that a subnet manager (opensm) runs`
      )
    }
    return { ...device, netdevs: behind }
  })
  return Report.check({
    id: "devices",
    title,
    status,
    summary: `${devices.length} ${devices.length === 1 ? "device" : "devices"}: ${
      devices.map((d) => d.name).join(", ")
    }`,
    details,
    fixes,
    data: { devices, kernelDevices: kernelNames }
  })
}

// ---------------------------------------------------------------------------------------------
// addresses

/**
 * Whether a device answers at `address` (what a listener or a connection there would use), through
 * the driver's getIbvContext. RpmaProviderError: no device answers there.
 *
 * @since 0.1.0
 * @category checks
 */
export const addressCheck = (
  binding: RpmaBinding.Binding | undefined,
  address: string,
  devices: DeviceFacts
): Effect.Effect<Report.Check> =>
  Effect.gen(function*() {
    const title = `address ${address}`
    const holder = devices.interfaces.find((i) => i.addresses.includes(address))
    if (binding === undefined) {
      return Report.check({
        id: "address",
        title,
        status: "fail",
        summary: "not checked: the addon is not loaded",
        fixes: ["load the addon (see the addon check)"],
        data: { address }
      })
    }
    const driver = yield* Effect.provideService(NativeDriver.make, RpmaBinding.RpmaBinding, binding)
    const result = yield* driver.getIbvContext(address, "local").pipe(
      Effect.timeout("20 seconds"),
      Effect.either
    )
    if (Either.isRight(result)) {
      const name = !hasDoctorFunctions(binding) ?
        Either.right(undefined) :
        Either.try(() => binding.ibvContextDeviceName(result.right))
      if (Either.isLeft(name)) {
        // librpma succeeded without a device: rdma_cm binds a loopback address without one.
        return Report.check({
          id: "address",
          title,
          status: "fail",
          summary: `no device answers at ${address}`,
          details: [
            `rpma_utils_get_ibv_context succeeded, but with no device context (${message(name.left)}): ` +
            "rdma_cm binds a loopback address without a device, and nothing can be registered or connected there"
          ],
          fixes: ["use the address of an interface an RDMA device is on"],
          data: { address, device: undefined, netdev: holder?.name, error: "NoDeviceContext" }
        })
      }
      const device = name.right
      return Report.check({
        id: "address",
        title,
        status: "ok",
        summary: `${device ?? "a device"} answers at ${address}`,
        details: holder === undefined ? [] : [`${address} is on ${holder.name}`],
        data: { address, device, netdev: holder?.name }
      })
    }
    const error = result.left
    const answering = devices.verbs?._tag === "Listed" ?
      devices.verbs.devices.flatMap((d) =>
        deviceAddresses(d.name, devices.kernel, devices.interfaces).flatMap((b) =>
          b.addresses.map((a) => `${d.name} at ${a}`)
        )
      ) :
      []
    const details = [error.message]
    if (answering.length > 0) details.push(`devices answer at: ${answering.join(", ")}`)
    const fixes = error._tag !== "RpmaProviderError" ?
      [] :
      holder === undefined ?
      [`${address} is not an address of this host: use one of its devices' addresses, or add the address`] :
      holder.internal ?
      [`${address} is a loopback address, which no RDMA device serves: use the address of an interface a device is on`] :
      [`bind an RDMA device to ${holder.name}, e.g. Soft-RoCE: \`rdma link add rxe0 type rxe netdev ${holder.name}\``]
    return Report.check({
      id: "address",
      title,
      status: "fail",
      summary: error._tag === "RpmaProviderError" ? `no device answers at ${address}` : `${error._tag}`,
      details,
      fixes,
      data: { address, error: error._tag, netdev: holder?.name }
    })
  })

// ---------------------------------------------------------------------------------------------
// memlock

const limitText = (limit: System.Limit | undefined): string =>
  limit === undefined ? "unknown" : limit === "unlimited" ? "unlimited" : Size.format(limit)

const covers = (limit: System.Limit | undefined, size: number): boolean =>
  limit === "unlimited" || (limit !== undefined && limit >= size)

/**
 * RLIMIT_MEMLOCK against the bytes this process means to register: ok when the soft limit is
 * unlimited or at least `size`, or when CAP_IPC_LOCK lifts it; otherwise how to raise it.
 *
 * @since 0.1.0
 * @category checks
 */
export const memlockCheck = (facts: System.MemlockFacts, size: number): Report.Check => {
  const title = "memlock"
  const limits = `RLIMIT_MEMLOCK soft ${limitText(facts.soft)}, hard ${limitText(facts.hard)}`
  const data = { ...facts, size }
  const base = "registered memory is pinned, and every registration of this process counts against the soft limit"
  if (covers(facts.soft, size)) {
    return Report.check({
      id: "memlock",
      title,
      status: "ok",
      summary: `${limits}: ${Size.format(size)} can be registered`,
      details: [base],
      data
    })
  }
  if (facts.capIpcLock && facts.initialUserNamespace) {
    return Report.check({
      id: "memlock",
      title,
      status: "ok",
      summary: `${limits}, but CAP_IPC_LOCK lifts it: ${Size.format(size)} can be registered`,
      details: [
        `${base}; with CAP_IPC_LOCK (here${facts.uid === 0 ? ", as root" : ""}) the kernel lets it pin past the limit`,
        "without that capability (another user, a container) the same program would fail to register"
      ],
      data
    })
  }
  if (facts.soft === undefined) {
    return Report.check({
      id: "memlock",
      title,
      status: "warn",
      summary: "RLIMIT_MEMLOCK unknown: /proc/self/limits could not be read",
      details: [base],
      fixes: ["check `ulimit -l` in the shell that starts node"],
      data
    })
  }
  const kib = Math.ceil(size / 1024)
  const raise = covers(facts.hard, size) ?
    [`in the shell that starts node: \`ulimit -l unlimited\` (or \`ulimit -l ${kib}\`; KiB), within the hard limit`] :
    [`the hard limit is below ${Size.format(size)}: only root can raise it`]
  const details = [
    base,
    `registering ${Size.format(size)} would fail with RpmaProviderError (ENOMEM from ibv_reg_mr)`
  ]
  if (facts.capIpcLock && !facts.initialUserNamespace) {
    details.push("CAP_IPC_LOCK is set, but in a user namespace, where the kernel does not let it lift the limit")
  }
  return Report.check({
    id: "memlock",
    title,
    status: "fail",
    summary: `${limits}: below the ${Size.format(size)} to register`,
    details,
    fixes: [
      ...raise,
      "for a user's logins: `<user> - memlock unlimited` in /etc/security/limits.conf (then log in again)",
      "for a systemd service: `LimitMEMLOCK=infinity` in its [Service] section",
      "for a container: `docker run --ulimit memlock=-1:-1` (or the runtime's equivalent)",
      "for a running process: `prlimit --pid <pid> --memlock=unlimited:unlimited` (as root)"
    ],
    data
  })
}

// ---------------------------------------------------------------------------------------------
// effect

/**
 * The effect this package resolves, against the range the effect-rdma packages support (the
 * same verdict as the check that runs when a package is loaded).
 *
 * @since 1.0.0
 * @category checks
 */
export const effectCheck = (
  found: { readonly version: string; readonly manifest: string } | undefined
): Report.Check => {
  const title = "effect"
  const data = { found: found?.version, required: EffectGuard.required, manifest: found?.manifest }
  if (found === undefined) {
    return Report.check({
      id: "effect",
      title,
      status: "fail",
      summary: "effect is not installed beside @effect-rdma/native",
      fixes: [`npm install effect@${EffectGuard.required}`],
      data
    })
  }
  return EffectGuard.satisfies(found.version, EffectGuard.required) ?
    Report.check({
      id: "effect",
      title,
      status: "ok",
      summary: `effect ${found.version} (needs ${EffectGuard.required})`,
      data
    }) :
    Report.check({
      id: "effect",
      title,
      status: "fail",
      summary: `effect ${found.version}, but @effect-rdma needs effect ${EffectGuard.required}`,
      details: [found.manifest],
      fixes: [`npm install effect@${EffectGuard.required} (pnpm: pnpm add effect@${EffectGuard.required})`],
      data
    })
}

// ---------------------------------------------------------------------------------------------
// fork

/**
 * Facts for {@link forkCheck}.
 *
 * @since 0.1.0
 * @category models
 */
export interface ForkFacts {
  /** `ibv_is_fork_initialized()`; undefined without the addon. */
  readonly status: "disabled" | "enabled" | "unneeded" | undefined
  readonly RDMAV_FORK_SAFE: string | undefined
  readonly IBV_FORK_SAFE: string | undefined
}

/**
 * Reads the facts for {@link forkCheck}.
 *
 * @since 0.1.0
 * @category facts
 */
export const forkFacts = (binding: RpmaBinding.Binding | undefined): Effect.Effect<ForkFacts> =>
  Effect.sync(() => ({
    status: binding !== undefined && hasDoctorFunctions(binding) ? binding.ibvForkStatus() : undefined,
    RDMAV_FORK_SAFE: process.env.RDMAV_FORK_SAFE,
    IBV_FORK_SAFE: process.env.IBV_FORK_SAFE
  }))

/**
 * Whether registered memory survives a fork (child_process.fork, spawn and exec all fork this
 * process before the child execs): the kernel copies pinned pages on fork ("unneeded"),
 * ibv_fork_init is in effect ("enabled"), or neither ("disabled").
 *
 * @since 0.1.0
 * @category checks
 */
export const forkCheck = (facts: ForkFacts): Report.Check => {
  const title = "fork safety"
  const env = (["RDMAV_FORK_SAFE", "IBV_FORK_SAFE"] as const).filter((name) => facts[name] !== undefined)
  const envText = env.length === 0 ?
    "RDMAV_FORK_SAFE and IBV_FORK_SAFE are not set" :
    `${env.map((name) => `${name}=${facts[name]}`).join(", ")} set`
  const data = { ...facts }
  const fixes = [
    "set RDMAV_FORK_SAFE=1 in the environment before node starts (libibverbs calls ibv_fork_init when it " +
    "initialises); it costs an madvise per registration",
    "or run a kernel that copies pinned pages on fork (Linux 5.13 and later report this to rdma-core ≥ 35; " +
    "`rdma system` shows copy-on-fork)",
    "or start child processes before registering memory, or use worker_threads instead"
  ]
  switch (facts.status) {
    case "unneeded":
      return Report.check({
        id: "fork",
        title,
        status: "ok",
        summary: "the kernel copies pinned pages on fork (ibv_is_fork_initialized: UNNEEDED)",
        details: [
          "child_process.fork, spawn and exec are safe with registered memory: the child gets copies and " +
          "this process keeps the pages the device uses",
          envText
        ],
        data
      })
    case "enabled":
      return Report.check({
        id: "fork",
        title,
        status: "ok",
        summary: "ibv_fork_init is in effect (ibv_is_fork_initialized: ENABLED)",
        details: [
          "registered memory is not inherited by a child (MADV_DONTFORK): child_process.fork, spawn and exec " +
          "are safe, since the child execs a new program; a child that touched those pages before exec would fault",
          envText
        ],
        data
      })
    case "disabled":
      return Report.check({
        id: "fork",
        title,
        status: "warn",
        summary: "not fork-safe (ibv_is_fork_initialized: DISABLED)",
        details: [
          "child_process.fork, spawn and exec fork this process first: until the child execs, registered pages " +
          "are copy-on-write, and a write by this process gives it a new copy of the page while the device keeps " +
          "using the old one: RDMA then silently reads or writes memory this process no longer sees",
          env.length === 0 ? envText : `${envText}, but ibv_fork_init did not take effect`
        ],
        fixes,
        data
      })
    case undefined:
      return Report.check({
        id: "fork",
        title,
        status: "warn",
        summary: "unknown: the addon is not loaded, so libibverbs was not asked",
        details: [envText],
        fixes: ["load the addon (see the addon check)", ...fixes],
        data
      })
  }
}

// ---------------------------------------------------------------------------------------------

/** Whether libibverbs lists a device or, without the addon, the kernel has one. */
const hasDevice = (devices: DeviceFacts): boolean =>
  devices.verbs === undefined ?
    (devices.kernel?.length ?? 0) > 0 :
    devices.verbs._tag === "Listed" && devices.verbs.devices.length > 0

/** The addon {@link RpmaBinding.load} picks by default, or where a build would be. */
const located = (): string => {
  try {
    return Load.resolveAddon()
  } catch {
    return RpmaBinding.defaultPath
  }
}

/**
 * Runs every check. Never fails: what goes wrong is a check's `fail`.
 *
 * @since 0.1.0
 * @category running
 */
export const run = (
  options: Options = {}
): Effect.Effect<Report.Report> =>
  Effect.gen(function*() {
    const path = options.addonPath ?? located()
    const size = options.size ?? defaultSize
    const addresses = options.addresses ?? []
    const loaded = yield* Effect.either(RpmaBinding.load(options.addonPath))
    const binding = Either.getOrUndefined(loaded)
    if (binding !== undefined && typeof binding.installLogCapture === "function") binding.installLogCapture()
    const checks: Array<Report.Check> = [effectCheck(EffectGuard.installed(import.meta.url)), addonCheck(path, loaded)]
    checks.push(librariesCheck(yield* libraryFacts(loaded)))
    const devices = yield* deviceFacts(binding)
    checks.push(devicesCheck(devices))
    for (const address of addresses) checks.push(yield* addressCheck(binding, address, devices))
    checks.push(memlockCheck(yield* System.memlockFacts, size))
    // Fork safety concerns registered memory, which needs a device: without one it is no warning.
    if (hasDevice(devices)) checks.push(forkCheck(yield* forkFacts(binding)))
    return Report.make(checks, { size, addresses })
  })
