#!/usr/bin/env bash
# The packages as a user gets them, outside this workspace:
#   1. from no prior build: build the prebuilt addons (x64 and arm64, Node 20 22 24 26:
#      packages/native/scripts/prebuild.mjs), pack the five packages with pnpm (each
#      package's `prepack` compiles it to dist/ and writes its guarded Node.js entry, as on a
#      publish from a clean clone; native's refuses to pack without every promised addon, which is
#      checked first); the packed package.json files hold no scripts, native's has os/cpu/libc;
#   2. publint and @arethetypeswrong/cli on each tarball;
#   3. `npm install` the tarballs into a fresh project; run a plain JavaScript program on the
#      simulated driver with `node`; check that the prebuilt addon loads and that the doctor runs
#      from compiled JavaScript (no TypeScript loader anywhere), and that the packed addons load
#      under x64 Node 22, 24 and 26 from the npm registry; where qemu can run, the same
#      program on the native driver in the Soft-RoCE VM (vm/run); no build-script warning from
#      npm; where qemu-aarch64 is installed, the packed arm64 addon loads under arm64 Node 22 and
#      26 (user mode); npm refuses the native package on another os or cpu (EBADPLATFORM);
#   4. type-check, with a strict tsconfig (strict, exactOptionalPropertyTypes,
#      noUncheckedIndexedAccess, noPropertyAccessFromIndexSignature), a TypeScript program, every
#      TypeScript block of README.md and every @example, against the shipped declarations; compile
#      README's main example and run it;
#   5. `pnpm add` the tarballs into another fresh project and run the JavaScript program there
#      (no "Ignored build scripts" warning);
#   6. Effect 4 (npm's `latest`): npm refuses the install (ERESOLVE); installed with pnpm, which only
#      warns, loading each package (import and require) and the doctor fail at once with
#      UnsupportedEffectVersion naming the version found and ^3.22.0.
#
#   scripts/outside-user.sh            KEEP=1 keeps the temporary directory
# Needs the npm registry (effect, node-gyp-build, ...), or npm's cache for --prefer-offline.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
# Under the checkout, so that the Soft-RoCE VM (which sees the checkout, not the host's /tmp) can
# run the installed program on the native driver.
mkdir -p .cache
work=$(mktemp -d "$repo/.cache/outside.XXXXXX")
[[ -n "${KEEP:-}" ]] || trap 'rm -rf "$work"' EXIT
step() { printf '\noutside-user: %s\n' "$*"; }
fail() { echo "outside-user: FAILED: $*" >&2; exit 1; }
tsc="$repo/node_modules/.bin/tsc"
# The Effect a user installs: the version README.md's install lines give (npm's `latest` is Effect 4).
effect_spec=$(grep -m1 -o 'npm install effect@[^ ]*' README.md | sed 's/^npm install //')
[[ -n "$effect_spec" ]] || fail "README.md's install line does not pin effect (effect@^3...)"
# npm and pnpm print peer-dependency problems as warnings: any is a failure.
no_peer_warnings() { if grep -iE 'peer|ERESOLVE' "$1"; then fail "$2 printed peer-dependency warnings (above)"; fi; }

lock_before=$(sha1sum <pnpm-lock.yaml)

# No prior build: packing must build each package itself (its `prepack` script), as a publish
# from a clean clone does.
step "the prebuilt addons, one per Node.js ABI and arch (no TypeScript build: packing does it)"
rm -rf packages/*/dist packages/*/.tsbuildinfo/build.tsbuildinfo
start=$(date +%s)
# Two builds at once (each one compiler process at a time): the x64 ones and the arm64 ones.
node packages/native/scripts/prebuild.mjs x64@20 x64@22 x64@24 x64@26 >"$work/prebuild-x64.log" 2>&1 &
x64_build=$!
node packages/native/scripts/prebuild.mjs arm64@20 arm64@22 arm64@24 arm64@26 >"$work/prebuild-arm64.log" 2>&1 &
arm64_build=$!
wait $x64_build || { tail -40 "$work/prebuild-x64.log"; fail "the x64 prebuilt addons did not build"; }
wait $arm64_build || { tail -40 "$work/prebuild-arm64.log"; fail "the arm64 prebuilt addons did not build"; }
grep '^prebuild:' "$work/prebuild-x64.log" "$work/prebuild-arm64.log" | sed 's/^[^:]*:/  /'
echo "  built in $(($(date +%s) - start)) s"

step "pack refuses a native package without every promised prebuilt addon"
hidden="$work/hidden-prebuild"
mkdir -p "$hidden"
mv packages/native/prebuilds/linux-arm64/rpma_addon.abi137.glibc.node "$hidden/"
set +e
(cd packages/native && pnpm pack --pack-destination "$work" >"$work/refused.log" 2>&1)
refused=$?
set -e
mv "$hidden/rpma_addon.abi137.glibc.node" packages/native/prebuilds/linux-arm64/
[[ $refused -ne 0 ]] || fail "pnpm pack of native succeeded without prebuilds/linux-arm64/rpma_addon.abi137.glibc.node"
grep -q "rpma_addon.abi137.glibc.node (linux-arm64, Node.js 24)" "$work/refused.log" && grep -q "node scripts/prebuild.mjs arm64@24" "$work/refused.log" ||
  { cat "$work/refused.log"; fail "the refusal does not name the missing addon and the command that builds it"; }
echo "  refused (exit $refused), naming the missing addon and: node scripts/prebuild.mjs arm64@24"

step "pack (each package's prepack builds its dist/ and its guarded entry)"
mkdir -p "$work/packs"
for p in core testing native rpc cluster; do
  (cd "packages/$p" && pnpm pack --pack-destination "$work/packs" >/dev/null)
done
# packages/native/prebuilds stays: the loader prefers the workspace's own build for its Node.js,
# and packages/native/scripts/test-nodes.sh runs the host tests on the prebuilt addons.
for t in "$work"/packs/*.tgz; do
  printf '  %-36s %6s KiB packed, %4s files\n' "$(basename "$t")" "$(($(stat -c %s "$t") / 1024))" "$(tar -tzf "$t" | wc -l)"
done
# One version for the five (changesets' fixed group): the tarballs are named after it.
version=$(node -p 'require("./packages/core/package.json").version')
core="$work/packs/effect-rdma-core-$version.tgz"
testing="$work/packs/effect-rdma-testing-$version.tgz"
native="$work/packs/effect-rdma-native-$version.tgz"
rpc="$work/packs/effect-rdma-rpc-$version.tgz" # installed into the npm project only, with its peers, for README's RPC block and its @examples
cluster="$work/packs/effect-rdma-cluster-$version.tgz" # the same, for its @examples
for t in "$core" "$testing" "$native" "$rpc" "$cluster"; do
  tar -tzf "$t" >"$work/files"
  if grep -E '\.ts$' "$work/files" | grep -v '\.d\.ts$'; then fail "TypeScript sources in $(basename "$t")"; fi
  grep -qx 'package/dist/index.js' "$work/files" && grep -qx 'package/dist/index.d.ts' "$work/files" &&
    grep -qx 'package/dist/node.js' "$work/files" ||
    fail "$(basename "$t") has no dist/index.js, dist/index.d.ts or dist/node.js: packing did not build it"
  # The published manifest holds only what works in the package: no scripts at all.
  tar -xzOf "$t" package/package.json >"$work/manifest.json"
  node -e 'const m = JSON.parse(require("fs").readFileSync(process.argv[1], "utf8"));
    if (Object.keys(m.scripts ?? {}).length > 0) { console.error(JSON.stringify(m.scripts)); process.exit(1) }' "$work/manifest.json" ||
    fail "$(basename "$t")'s package.json has scripts (above)"
done
tar -xzOf "$native" package/package.json >"$work/manifest.json"
node -e 'const m = JSON.parse(require("fs").readFileSync(process.argv[1], "utf8"));
  const want = { os: ["linux"], cpu: ["x64", "arm64"], libc: ["glibc"] };
  for (const [k, v] of Object.entries(want)) if (JSON.stringify(m[k]) !== JSON.stringify(v)) throw new Error(`${k}: ${JSON.stringify(m[k])}`);
  for (const [name, file] of Object.entries(m.bin)) console.log(`  bin ${name}: ${file}`)' "$work/manifest.json" ||
  fail "the native package.json lacks os/cpu/libc"
echo "  no scripts in any packed package.json; native: os linux, cpu x64 arm64, libc glibc"
tar -tzf "$native" >"$work/native-files" # a file: `tar | grep -q` would fail on tar's SIGPIPE under pipefail
for arch in x64 arm64; do
  for abi in 115 127 137 147; do
    grep -qx "package/prebuilds/linux-$arch/rpma_addon.abi$abi.glibc.node" "$work/native-files" ||
      fail "the native tarball has no prebuilt addon for linux-$arch ABI $abi"
  done
done
echo "  the native tarball carries prebuilt addons for linux-x64 and linux-arm64, ABI 115 127 137 147 (Node 20 22 24 26)"

step "publint and arethetypeswrong"
for t in "$core" "$testing" "$native" "$rpc" "$cluster"; do
  node_modules/.bin/publint run --strict "$t"
  # ESM only (Node >= 20.19 can also require() it): the CommonJS and node10 resolutions are not targets.
  node_modules/.bin/attw --profile esm-only --format table-flipped "$t"
done

step "npm install the tarballs into a fresh project"
app="$work/npm-app"
mkdir -p "$app"
cat >"$app/package.json" <<'EOF'
{ "name": "outside-user", "version": "1.0.0", "private": true, "type": "module" }
EOF
start=$(date +%s)
# @effect/vitest too (testing's peer, which its @examples import): found in the app, beside the app's
# effect. Missing there, an import of it resolves up to this workspace's, built against the lockfile's
# effect: another copy of Effect's types, which the app's newer effect 3.x does not match.
(cd "$app" && npm install --no-audit --no-fund --prefer-offline --loglevel=warn \
  "$core" "$testing" "$native" "$effect_spec" "@types/node@^20.19.0" typescript@5.9.3 \
  "@effect/vitest@^0.30.0" "vitest@^3.2.0" \
  "$rpc" "@effect/rpc@^0.76.2" "@effect/platform@^0.97.1" \
  "$cluster" "@effect/cluster@^0.60.2" "@effect/sql@^0.52.1") 2>&1 | tee "$work/npm.log"
no_peer_warnings "$work/npm.log" "npm install"
# No install script: nothing of ours for npm 11's allowScripts review (or any build) to print
# (@effect/rpc's msgpackr-extract, installed here for the rpc package, has one of its own).
if grep -iE 'allowScripts|install-scripts|gyp' "$work/npm.log" | grep -E '@effect-rdma|rpma'; then
  fail "npm install printed build-script output for an @effect-rdma package (above)"
fi
printf '  installed in %ss; node_modules: %s; @effect-rdma: %s\n' "$(($(date +%s) - start))" \
  "$(du -sh "$app/node_modules" | cut -f1)" "$(du -sh "$app/node_modules/@effect-rdma" | cut -f1)"
[[ ! -d "$app/node_modules/tsx" ]] || fail "tsx was installed: a package still depends on a TypeScript loader"

cat >"$app/main.mjs" <<'EOF'
// A plain JavaScript program on the simulated driver: register memory, publish its descriptor,
// rebuild it on the "other side" and check what it allows.
import { Effect, Layer } from "effect"
import { LocalMr, Peer, RemoteMr, Usage } from "@effect-rdma/core"
import { SimulatedDriver } from "@effect-rdma/testing"

const program = Effect.scoped(Effect.gen(function*() {
  const peer = yield* Peer.Peer
  const mr = yield* LocalMr.allocate(peer, 4096, Usage.combine(Usage.WRITE_DST, Usage.FLUSH_TYPE_VISIBILITY))
  const bytes = yield* LocalMr.descriptor(mr)
  const remote = yield* RemoteMr.fromDescriptor(bytes).pipe(Effect.flatMap(RemoteMr.require(Usage.WRITE_DST)))
  return `descriptor ${bytes.length} bytes, remote region ${remote.size} bytes`
}))

const Live = Peer.layer(SimulatedDriver.DEFAULT_ADDRESS).pipe(Layer.provideMerge(SimulatedDriver.layer))
console.log(await Effect.runPromise(Effect.provide(program, Live)))
EOF
step "node main.mjs (simulated driver)"
(cd "$app" && node main.mjs) | tee "$work/main.out"
grep -q "descriptor 21 bytes, remote region 4096 bytes" "$work/main.out" || fail "main.mjs printed something else"

cat >"$app/addon.mjs" <<'EOF'
// The installed package loads its addon (the prebuilt one, through node-gyp-build) and builds the
// native driver's layer; importing it never throws.
import { Effect } from "effect"
import { NativeDriver, RpmaBinding } from "@effect-rdma/native"
import { RdmaDriver } from "@effect-rdma/core/Driver"

const driver = await Effect.runPromise(Effect.provide(RdmaDriver, NativeDriver.layer))
console.log(`native driver: ${driver.name}; addon ${typeof (await Effect.runPromise(RpmaBinding.load())).peerNew}`)
EOF
step "node addon.mjs (the native driver's layer over the installed addon)"
(cd "$app" && node addon.mjs)
[[ ! -d "$app/node_modules/@effect-rdma/native/build" ]] || fail "something built the addon at install: the package has no install script"
echo "  (prebuilt addons: $(ls "$app"/node_modules/@effect-rdma/native/prebuilds/linux-x64/ | tr "\n" " "))"

cat >"$app/native.mjs" <<'EOF'
// main.mjs's program on the native driver, on the device at RDMA_ADDRESS.
import { Effect, Layer } from "effect"
import { LocalMr, Peer, RemoteMr, Usage } from "@effect-rdma/core"
import { NativeDriver } from "@effect-rdma/native"

const program = Effect.scoped(Effect.gen(function*() {
  const peer = yield* Peer.Peer
  const mr = yield* LocalMr.allocate(peer, 4096, Usage.combine(Usage.WRITE_DST, Usage.FLUSH_TYPE_VISIBILITY))
  const bytes = yield* LocalMr.descriptor(mr)
  const remote = yield* RemoteMr.fromDescriptor(bytes).pipe(Effect.flatMap(RemoteMr.require(Usage.WRITE_DST)))
  return `descriptor ${bytes.length} bytes, remote region ${remote.size} bytes`
}))

const Live = Peer.layer(process.env.RDMA_ADDRESS).pipe(Layer.provideMerge(NativeDriver.layer))
console.log(await Effect.runPromise(Effect.provide(program, Live)))
EOF
if [[ -n "${SKIP_DEVICE_TESTS:-}" ]] || ! command -v qemu-system-x86_64 >/dev/null; then
  step "node native.mjs in the Soft-RoCE VM: skipped (SKIP_DEVICE_TESTS is set or qemu is missing)"
else
  step "node native.mjs in the Soft-RoCE VM (the installed packages on the native driver)"
  (cd "$app" && VM_TIMEOUT=300 "$repo/vm/run" node native.mjs) | tee "$work/native.out"
  grep -q "descriptor 21 bytes, remote region 4096 bytes" "$work/native.out" || fail "native.mjs printed something else"
fi

step "node addon.mjs under x64 Node 22, 24 and 26 from the npm registry (the packed prebuilt addons)"
for major in 22 24 26; do
  nodedir=$(node packages/native/scripts/prebuild.mjs --where "x64@$major")
  (cd "$app" && "$nodedir/bin/node" addon.mjs | sed "s/^/  Node $major: /") || fail "the packed native package does not load under Node $major"
done

if command -v qemu-aarch64 >/dev/null; then
  step "node addon.mjs under arm64 Node 22 and 26 in qemu-aarch64 (user mode): the packed arm64 addon"
  for major in 22 26; do
    nodedir=$(node packages/native/scripts/prebuild.mjs --where "arm64@$major")
    (cd "$app" && qemu-aarch64 "$nodedir/bin/node" -e 'import("./addon.mjs").then(() => console.log(`${process.version} ${process.arch}`))' |
      sed "s/^/  arm64 Node $major: /") || fail "the packed arm64 addon does not load under arm64 Node $major"
  done
else
  step "the packed arm64 addon under qemu: skipped (qemu-aarch64 is missing: packages/native/scripts/setup-arm64.sh)"
fi

step "npm refuses the native package where it cannot run (os, cpu)"
# npm checks a dependency's os/cpu/libc against process.platform and process.arch (its --os and
# --cpu flags apply to optional dependencies only): npm runs here as on a darwin and an ia32 machine.
echo 'Object.defineProperty(process, "platform", { value: process.env.AS_PLATFORM ?? process.platform })
Object.defineProperty(process, "arch", { value: process.env.AS_ARCH ?? process.arch })' >"$work/as-platform.cjs"
for as in AS_PLATFORM=darwin AS_ARCH=ia32; do
  refusing="$work/refusing-$as"
  mkdir -p "$refusing" && echo '{ "name": "refusing", "version": "1.0.0", "private": true }' >"$refusing/package.json"
  set +e
  (cd "$refusing" && env "$as" NODE_OPTIONS="--require $work/as-platform.cjs" \
    npm install --no-audit --no-fund --prefer-offline --loglevel=error "$core" "$native") >"$work/refused-npm.log" 2>&1
  status=$?
  set -e
  [[ $status -ne 0 ]] && grep -q EBADPLATFORM "$work/refused-npm.log" || { cat "$work/refused-npm.log"; fail "npm on $as installed the native package"; }
  echo "  npm as $as: $(grep -m1 -o 'Unsupported platform.*' "$work/refused-npm.log")"
done

step "npx effect-rdma-doctor (compiled JavaScript)"
set +e
(cd "$app" && NO_COLOR=1 npx --no-install effect-rdma-doctor --json >"$work/doctor.json")
status=$?
(cd "$app" && npx --no-install effect-rdma-doctor --no-such-flag 2>/dev/null)
usage=$?
set -e
node -e 'const r = JSON.parse(require("fs").readFileSync(process.argv[1], "utf8"));
  if (r.schemaVersion !== 1) throw new Error("schemaVersion");
  console.log("  " + r.checks.map((c) => c.id + " " + c.status).join(", "))' "$work/doctor.json"
[[ $status -le 1 ]] || fail "the doctor exited $status"
[[ $usage -eq 2 ]] || fail "the doctor exited $usage for an unknown flag, not 2"
set +e
(cd "$app" && npx --no-install effect-rdma-doctor --address nonsense >/dev/null 2>&1)
malformed=$?
set -e
[[ $malformed -eq 2 ]] || fail "the doctor exited $malformed for --address nonsense, not 2"
grep -q '"id": "effect"' "$work/doctor.json" || fail "the doctor has no effect row"

step "type-check with a strict tsconfig against the shipped declarations"
# "DOM" in lib: @effect/rpc's declarations (installed here for README's RPC block) name the DOM's
# Transferable, as README's RPC section tells its users.
cat >"$app/tsconfig.json" <<'EOF'
{
  "compilerOptions": {
    "strict": true,
    "exactOptionalPropertyTypes": true,
    "noUncheckedIndexedAccess": true,
    "noPropertyAccessFromIndexSignature": true,
    "module": "NodeNext",
    "moduleResolution": "NodeNext",
    "target": "ES2022",
    "lib": ["ES2022", "DOM"],
    "types": ["node"],
    "moduleDetection": "force",
    "skipLibCheck": false,
    "outDir": "out"
  },
  "include": ["src"]
}
EOF
mkdir -p "$app/src"
cat >"$app/src/program.ts" <<'EOF'
import { LocalMr, Peer, RemoteMr, Usage } from "@effect-rdma/core"
import { SimulatedDriver } from "@effect-rdma/testing"
import { Effect, Layer } from "effect"

const program = Effect.scoped(Effect.gen(function*() {
  const peer = yield* Peer.Peer
  const mr = yield* LocalMr.allocate(peer, 4096, Usage.combine(Usage.WRITE_DST, Usage.FLUSH_TYPE_VISIBILITY))
  const bytes: Uint8Array = yield* LocalMr.descriptor(mr)
  const remote: RemoteMr.RemoteMr<"WRITE_DST"> = yield* RemoteMr.fromDescriptor(bytes).pipe(
    Effect.flatMap(RemoteMr.require(Usage.WRITE_DST))
  )
  return remote
}))

const Live = Peer.layer(SimulatedDriver.DEFAULT_ADDRESS).pipe(Layer.provideMerge(SimulatedDriver.layer))
export const size: Promise<bigint> = Effect.runPromise(Effect.provide(program, Live)).then((mr) => mr.size)
EOF
node scripts/doc-examples.mjs "$app/src" | sed 's/^/  /'
[[ -f "$app/src/main.ts" ]] || fail "README.md has no block marked <!-- main example -->"
(cd "$app" && "$tsc" -p tsconfig.json) || fail "the program, README's blocks or the @examples do not type-check (files under $app/src)"
echo "  $(ls "$app/src" | wc -l) files type-check"

step "README's main example, compiled, on node"
(cd "$app" && node out/main.js)

step "pnpm add the tarballs into another fresh project"
papp="$work/pnpm-app"
mkdir -p "$papp"
cp "$app/main.mjs" "$app/addon.mjs" "$papp/"
# The packages' dependencies on each other would be fetched from the registry: point them at the tarballs.
cat >"$papp/package.json" <<EOF
{
  "name": "outside-user-pnpm", "version": "1.0.0", "private": true, "type": "module",
  "pnpm": { "overrides": { "@effect-rdma/core": "file:$core", "@effect-rdma/testing": "file:$testing", "@effect-rdma/rpc": "file:$rpc" } }
}
EOF
start=$(date +%s)
# --ignore-workspace: the project sits under the checkout, and without it pnpm adopts it into this
# workspace and writes its tarball paths into the workspace's lockfile.
(cd "$papp" && pnpm add --ignore-workspace --config.confirmModulesPurge=false --reporter=append-only \
  "$core" "$testing" "$native" "$effect_spec") >"$work/pnpm.log" 2>&1 || { cat "$work/pnpm.log"; fail "pnpm add"; }
no_peer_warnings "$work/pnpm.log" "pnpm add"
if grep -iE 'build scripts|approve-builds' "$work/pnpm.log"; then fail "pnpm add printed a build-script warning (above)"; fi
printf '  installed in %ss, no build-script warning (the package has no install script)\n' "$(($(date +%s) - start))"
(cd "$papp" && node main.mjs && node addon.mjs)

step "Effect 4 (npm's latest): npm refuses it; under pnpm every package fails at once, naming the versions"
e4="$work/effect4-npm"
mkdir -p "$e4" && echo '{ "name": "effect4", "version": "1.0.0", "private": true, "type": "module" }' >"$e4/package.json"
set +e
(cd "$e4" && npm install --no-audit --no-fund --prefer-offline --loglevel=error "$core" effect@4) >"$work/e4-npm.log" 2>&1
status=$?
set -e
[[ $status -ne 0 ]] && grep -q ERESOLVE "$work/e4-npm.log" || { cat "$work/e4-npm.log"; fail "npm installed @effect-rdma/core beside effect@4"; }
echo "  npm install effect@4: refused (ERESOLVE)"
e4="$work/effect4-pnpm"
mkdir -p "$e4"
sed 's/"outside-user-pnpm"/"outside-user-effect4"/' "$papp/package.json" >"$e4/package.json"
(cd "$e4" && pnpm add --ignore-workspace --config.confirmModulesPurge=false --reporter=append-only \
  "$core" "$testing" "$native" "$rpc" "$cluster" effect@4) >"$work/e4-pnpm.log" 2>&1 || { cat "$work/e4-pnpm.log"; fail "pnpm add effect@4"; }
found=$(node -p 'require(process.argv[1]).version' "$e4/node_modules/effect/package.json")
[[ $found == 4.* ]] || fail "pnpm installed effect $found, not 4.x"
for pkg in core testing native rpc cluster; do
  for how in import require; do
    if [[ $how == import ]]; then code="import(\"@effect-rdma/$pkg\").then(() => process.exit(3), (e) => { console.log(e._tag + \": \" + e.message); process.exit(e._tag === \"UnsupportedEffectVersion\" ? 0 : 4) })"
    else code="try { require(\"@effect-rdma/$pkg\"); process.exit(3) } catch (e) { console.log(e._tag + \": \" + e.message); process.exit(e._tag === \"UnsupportedEffectVersion\" ? 0 : 4) }"; fi
    (cd "$e4" && node -e "$code") >"$work/e4.out" 2>&1 || { cat "$work/e4.out"; fail "@effect-rdma/$pkg ($how) under effect $found did not fail with UnsupportedEffectVersion"; }
    grep -q "found effect $found" "$work/e4.out" && grep -q 'needs effect ^3.22.0' "$work/e4.out" || { cat "$work/e4.out"; fail "the error does not name effect $found and ^3.22.0"; }
  done
done
echo "  $(cat "$work/e4.out")"
echo "  (each of core, testing, native, rpc, cluster, by import and by require)"
set +e
(cd "$e4" && npx --no-install effect-rdma-doctor >"$work/e4-doctor.out" 2>&1)
status=$?
set -e
[[ $status -eq 1 ]] && grep -q "^fail  effect  effect $found, but @effect-rdma needs effect ^3.22.0" "$work/e4-doctor.out" ||
  { cat "$work/e4-doctor.out"; fail "the doctor under effect $found: exit $status, without its failed effect row"; }
echo "  doctor: $(head -1 "$work/e4-doctor.out") (exit 1)"

[[ "$(sha1sum <pnpm-lock.yaml)" == "$lock_before" ]] || fail "the workspace's pnpm-lock.yaml changed: a user's install leaked into the workspace"

step "ok"
