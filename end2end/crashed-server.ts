import { spawn, ChildProcess } from "node:child_process";
import { mkdirSync, rmSync } from "node:fs";

// A second server for the recovery tests: the binary `cargo leptos end-to-end` built, on a port
// and database of its own, that can be armed at a failpoint and killed with SIGKILL there.

export const CRASH_PORT = 3005;
export const CRASH_URL = `http://127.0.0.1:${CRASH_PORT}`;
const DIR = "../target/e2e/crash";

export class CrashServer {
  private constructor(
    private child: ChildProcess,
    readonly reached: Promise<string>,
  ) {}

  /** A fresh database (with `fresh`), then the binary, armed at `failpoint` if given. */
  static async start(options: { failpoint?: string; fresh?: boolean } = {}): Promise<CrashServer> {
    if (options.fresh) rmSync(DIR, { recursive: true, force: true });
    mkdirSync(DIR, { recursive: true });
    const env: NodeJS.ProcessEnv = {
      ...process.env,
      NRLLM_CONFIG: "nrllm-e2e.toml",
      NRLLM_SITE_ADDR: `127.0.0.1:${CRASH_PORT}`,
      NRLLM_DATABASE_URL: `sqlite:${DIR}/crash.db`,
      NRLLM_EXPORT_DIR: `${DIR}/exports`,
      NRLLM_DEMO_THINK_MS: "100",
      NRLLM_LOG: "warn",
      LEPTOS_OUTPUT_NAME: "nrllm-playground",
      LEPTOS_SITE_ROOT: "../target/site",
      LEPTOS_SITE_PKG_DIR: "pkg",
    };
    delete env.NRLLM_FAILPOINT;
    if (options.failpoint) env.NRLLM_FAILPOINT = options.failpoint;
    const child = spawn("../target/debug/nrllm-playground", [], {
      env,
      stdio: ["ignore", "ignore", "pipe"],
    });
    const reached = new Promise<string>((resolve) => {
      let seen = "";
      child.stderr!.on("data", (chunk: Buffer) => {
        seen += chunk.toString();
        const match = /failpoint reached: (\w+)/.exec(seen);
        if (match) resolve(match[1]);
      });
    });
    const server = new CrashServer(child, reached);
    const deadline = Date.now() + 30_000;
    for (;;) {
      try {
        if ((await fetch(`${CRASH_URL}/login`)).ok) return server;
      } catch {
        // not listening yet
      }
      if (child.exitCode !== null) throw new Error(`the server exited with ${child.exitCode}`);
      if (Date.now() > deadline) throw new Error(`${CRASH_URL} did not answer within 30 s`);
      await new Promise((r) => setTimeout(r, 100));
    }
  }

  /** SIGKILL, and wait until the process is gone. */
  async kill(): Promise<void> {
    if (this.child.exitCode !== null || this.child.signalCode !== null) return;
    const gone = new Promise((resolve) => this.child.once("exit", resolve));
    this.child.kill("SIGKILL");
    await gone;
  }
}
