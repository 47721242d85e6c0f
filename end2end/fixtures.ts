import { test as base, expect } from "@playwright/test";
import { readFileSync } from "node:fs";

// The suite acts as the user `operator` (an admin, made by global-setup): pages with its session
// cookie, and API calls with the cookie and the CSRF header a script sends with it.

export const STORAGE = "../target/e2e/operator.json";
export const ADMIN_PASSWORD = process.env.NRLLM_ADMIN_PASSWORD ?? "e2e-admin-password-1";
export const USER_PASSWORD = "e2e-user-password-1";

/** The CSRF cookie's value in a saved storage state. */
export function csrfOf(path: string = STORAGE): string {
  const state = JSON.parse(readFileSync(path, "utf8"));
  const cookie = state.cookies.find((c: { name: string }) => c.name === "nrllm_csrf");
  if (!cookie) throw new Error(`no nrllm_csrf cookie in ${path}`);
  return cookie.value;
}

export const test = base.extend({
  request: async ({ playwright, baseURL }, use) => {
    const context = await playwright.request.newContext({
      baseURL,
      storageState: STORAGE,
      extraHTTPHeaders: { "x-csrf-token": csrfOf() },
    });
    await use(context);
    await context.dispose();
  },
});

export { expect };
