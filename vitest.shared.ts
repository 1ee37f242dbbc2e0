import type { ViteUserConfig } from "vitest/config"

const once = Symbol.for("effect-rdma/files-running-at-a-stop")

const config: ViteUserConfig = {
  plugins: [{
    // A test process that dies stops vitest 3.2 with only "Channel closed" and no report
    // (tinypool's teardown of the dead process fails unhandled: scripts/repro-channel-closed.mjs).
    // Say which files were running, which nothing else will. Once per vitest, not per project.
    name: "effect-rdma:files-running-at-a-stop",
    configureVitest({ vitest }) {
      const state = vitest as unknown as Record<symbol, boolean>
      if (state[once]) return
      state[once] = true
      // Before vitest's own exit listener, which calls process.exit() again: later ones never run.
      process.prependOnceListener("exit", (code) => {
        if (code === 0) return
        const running = vitest.state.getFiles().filter((file) => file.result?.state === "run")
        if (running.length > 0) {
          process.stderr.write(
            `vitest stopped while these files ran (a test process that dies stops it so): ${
              running.map((file) => file.filepath).join(", ")
            }\n`
          )
        }
      })
    }
  }],
  test: {
    include: ["test/**/*.test.ts"],
    sequence: { concurrent: true },
    fakeTimers: { toFake: undefined }
  }
}

export default config
