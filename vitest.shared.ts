import type { ViteUserConfig } from "vitest/config"

const config: ViteUserConfig = {
  test: {
    include: ["test/**/*.test.ts"],
    sequence: { concurrent: true },
    fakeTimers: { toFake: undefined }
  }
}

export default config
