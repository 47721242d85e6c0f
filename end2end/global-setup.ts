import { request as playwrightRequest } from "@playwright/test";
import { startHostileProvider } from "./hostile-provider";
import { startMailServer } from "./mail-server";
import { ADMIN_PASSWORD, STORAGE, USER_PASSWORD } from "./fixtures";

// `cargo leptos end-to-end` starts the server and Playwright at the same moment: start the local
// model and mail servers the e2e settings name, wait for the site, then make the suite's users (the
// server's first start made `admin` with NRLLM_ADMIN_PASSWORD) and log in as `operator`.

/** The users the suite acts as: `operator` (every right), and two people for four-eyes. */
export const USERS: [string, string][] = [
  ["operator", "admin"],
  ["alice", "approver"],
  ["bert", "approver"],
];

async function makeUsers(url: string) {
  const admin = await playwrightRequest.newContext({ baseURL: url });
  const login = await admin.post("/api/nrllm_login", { data: { name: "admin", password: ADMIN_PASSWORD } });
  if (!login.ok()) throw new Error(`admin cannot log in: ${login.status()} ${await login.text()}`);
  const csrf = (await admin.storageState()).cookies.find((c) => c.name === "nrllm_csrf")!.value;
  for (const [name, role] of USERS) {
    const made = await admin.post("/api/nrllm_user_create", {
      data: { name, password: USER_PASSWORD, role },
      headers: { "x-csrf-token": csrf },
    });
    if (!made.ok() && made.status() !== 409) {
      throw new Error(`cannot make the user ${name}: ${made.status()} ${await made.text()}`);
    }
  }
  await admin.dispose();
  const operator = await playwrightRequest.newContext({ baseURL: url });
  const ok = await operator.post("/api/nrllm_login", { data: { name: "operator", password: USER_PASSWORD } });
  if (!ok.ok()) throw new Error(`operator cannot log in: ${ok.status()}`);
  await operator.storageState({ path: STORAGE });
  await operator.dispose();
}

export default async function globalSetup() {
  const hostile = await startHostileProvider();
  const mail = await startMailServer();
  const url = process.env.NRLLM_E2E_URL ?? "http://127.0.0.1:3000";
  const deadline = Date.now() + 120_000;
  let lastError: unknown = null;
  while (Date.now() < deadline) {
    try {
      const response = await fetch(`${url}/login`);
      if (response.ok) {
        await makeUsers(url);
        return async () => {
          hostile.close();
          mail.close();
        };
      }
      lastError = new Error(`HTTP ${response.status}`);
    } catch (error) {
      lastError = error;
    }
    await new Promise((resolve) => setTimeout(resolve, 250));
  }
  hostile.close();
  mail.close();
  throw new Error(`the server at ${url} did not answer within 120 s: ${lastError}`);
}
