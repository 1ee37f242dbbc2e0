#!/usr/bin/env bash
# Type-checks every `@example` of packages/*/src (module pages included) and every TypeScript block
# of README.md against the workspace's sources (strict, exactOptionalPropertyTypes,
# noUncheckedIndexedAccess): part of `pnpm run docs`. scripts/outside-user.sh checks the same
# blocks against the packed packages' declarations.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=.cache/examples
rm -rf "$dir" && mkdir -p "$dir"
node scripts/doc-examples.mjs "$dir/src" >/dev/null
echo '{ "type": "module" }' >"$dir/package.json"
cat >"$dir/tsconfig.json" <<'JSON'
{
  "compilerOptions": {
    "strict": true, "exactOptionalPropertyTypes": true, "noUncheckedIndexedAccess": true,
    "module": "NodeNext", "moduleResolution": "NodeNext",
    "target": "ES2022", "lib": ["ES2022"], "types": ["node"], "moduleDetection": "force",
    "skipLibCheck": true, "noEmit": true, "allowImportingTsExtensions": true
  },
  "include": ["src"]
}
JSON
node_modules/.bin/tsc -p "$dir/tsconfig.json" || { echo "check-examples: the blocks above do not type-check (files under $dir/src)" >&2; exit 1; }
echo "check-examples: $(ls "$dir/src" | wc -l) examples and README blocks type-check"
