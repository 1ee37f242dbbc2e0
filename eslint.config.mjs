// Lint and format, set up as Effect's own v3 repository does: ESLint's and typescript-eslint's
// recommended rules, import hygiene, and formatting by dprint through @effect/eslint-plugin's
// `@effect/dprint` rule (so `pnpm lint --fix` formats). Where this repository differs, the rule
// says why.
import * as effectEslint from "@effect/eslint-plugin"
import { fixupPluginRules } from "@eslint/compat"
import js from "@eslint/js"
import tsPlugin from "@typescript-eslint/eslint-plugin"
import tsParser from "@typescript-eslint/parser"
import importPlugin from "eslint-plugin-import"
import sortDestructureKeys from "eslint-plugin-sort-destructure-keys"

export default [
  {
    ignores: [
      "**/dist",
      "**/build",
      "**/.vm-build",
      "bench/.build",
      "**/.tsc",
      "**/.cache",
      "docs/api",
      "**/*.md",
      "**/node_modules",
      "vm/**"
    ]
  },
  js.configs.recommended,
  ...tsPlugin.configs["flat/recommended"],
  ...effectEslint.configs.dprint,
  {
    plugins: {
      import: fixupPluginRules(importPlugin),
      "sort-destructure-keys": sortDestructureKeys
    },
    languageOptions: {
      parser: tsParser,
      ecmaVersion: 2022,
      sourceType: "module",
      globals: {
        // Node.js, which every package targets
        process: "readonly",
        console: "readonly",
        Buffer: "readonly",
        setTimeout: "readonly",
        clearTimeout: "readonly",
        setInterval: "readonly",
        clearInterval: "readonly",
        setImmediate: "readonly",
        performance: "readonly",
        URL: "readonly",
        TextEncoder: "readonly",
        TextDecoder: "readonly",
        AbortController: "readonly",
        structuredClone: "readonly",
        queueMicrotask: "readonly",
        globalThis: "readonly"
      }
    },
    rules: {
      "no-fallthrough": "off",
      "no-irregular-whitespace": "off",
      "object-shorthand": "error",
      "prefer-destructuring": "off",
      "sort-imports": "off",
      "no-restricted-syntax": ["error", {
        selector: "CallExpression[callee.property.name='push'] > SpreadElement.arguments",
        message: "Do not use spread arguments in Array.push"
      }],
      "no-unused-vars": "off",
      "require-yield": "off",
      "prefer-rest-params": "off",
      "prefer-spread": "off",
      "import/first": "error",
      "import/newline-after-import": "error",
      "import/no-duplicates": "error",
      "sort-destructure-keys/sort-destructure-keys": "error",
      "@typescript-eslint/array-type": ["warn", { default: "generic", readonly: "generic" }],
      "@typescript-eslint/no-non-null-assertion": "off",
      "@typescript-eslint/no-explicit-any": "off",
      "@typescript-eslint/no-empty-object-type": "off",
      "@typescript-eslint/no-unsafe-function-type": "off",
      "@typescript-eslint/no-wrapper-object-types": "off",
      // Inline `type` markers (`import { type A, B }`), as this repository writes them.
      "@typescript-eslint/consistent-type-imports": ["warn", { fixStyle: "inline-type-imports" }],
      "@typescript-eslint/no-unused-vars": ["error", { argsIgnorePattern: "^_", varsIgnorePattern: "^_" }],
      "@typescript-eslint/ban-ts-comment": "off",
      "@typescript-eslint/no-array-constructor": "off",
      "@typescript-eslint/no-use-before-define": "off",
      "@typescript-eslint/no-namespace": "off",
      "@effect/dprint": ["error", {
        config: {
          indentWidth: 2,
          lineWidth: 120,
          semiColons: "asi",
          quoteStyle: "alwaysDouble",
          trailingCommas: "never",
          operatorPosition: "maintain",
          "arrowFunction.useParentheses": "force"
        }
      }]
    }
  },
  {
    // CommonJS programs: the addon's fixtures and valgrind's smoke run, which probe the addon with
    // bad calls and ignore what each throws (an empty catch is the point).
    files: ["**/*.cjs"],
    languageOptions: {
      sourceType: "commonjs",
      globals: {
        require: "readonly",
        module: "writable",
        exports: "writable",
        __dirname: "readonly",
        __filename: "readonly"
      }
    },
    rules: {
      "@typescript-eslint/no-require-imports": "off",
      "no-empty": ["error", { allowEmptyCatch: true }]
    }
  },
  {
    // The libraries log through Effect, never to the console (the doctor command prints its report).
    files: ["packages/*/src/**/*"],
    ignores: ["packages/native/src/doctor/**"],
    rules: { "no-console": "error" }
  },
  {
    // Module by module, as Effect's packages import each other (tree-shaking, no barrel cycles).
    files: ["packages/*/src/**/*"],
    rules: {
      "@effect/no-import-from-barrel-package": ["error", {
        packageNames: ["effect", "@effect/platform", "@effect/rpc"]
      }]
    }
  }
]
