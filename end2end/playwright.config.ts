import { defineConfig } from "@playwright/test";

// The server is started by `cargo leptos end-to-end`; global-setup waits until it answers.
const baseURL = process.env.NRLLM_E2E_URL ?? "http://127.0.0.1:3000";

export default defineConfig({
  testDir: "./tests",
  globalSetup: "./global-setup.ts",
  timeout: 30_000,
  expect: { timeout: 10_000 },
  fullyParallel: false,
  workers: 1,
  // One retry: a test that passes only on its second try is reported as flaky in the list.
  retries: 1,
  reporter: [["list"]],
  forbidOnly: !!process.env.CI,
  use: {
    baseURL,
    // The session of the user `operator`, made by global-setup.
    storageState: "../target/e2e/operator.json",
    trace: "retain-on-failure",
    launchOptions: {
      // Debian's Chromium; Playwright never downloads a browser here.
      executablePath: "/usr/bin/chromium",
      args: [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
      ],
    },
  },
  projects: [{ name: "chromium" }],
});
