import { startHostileProvider } from "./hostile-provider";

// `cargo leptos end-to-end` starts the server and Playwright at the same moment: start the local
// model servers the e2e settings name, then wait for the site.
export default async function globalSetup() {
  const hostile = await startHostileProvider();
  const url = process.env.NRLLM_E2E_URL ?? "http://127.0.0.1:3000";
  const deadline = Date.now() + 120_000;
  let lastError: unknown = null;
  while (Date.now() < deadline) {
    try {
      const response = await fetch(url);
      if (response.ok) return async () => void hostile.close();
      lastError = new Error(`HTTP ${response.status}`);
    } catch (error) {
      lastError = error;
    }
    await new Promise((resolve) => setTimeout(resolve, 250));
  }
  hostile.close();
  throw new Error(`the server at ${url} did not answer within 120 s: ${lastError}`);
}
