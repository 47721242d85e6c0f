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

/** What a page logged as an error, with where. */
type Logged = { text: string; url: string };

/**
 * Every test fails if a page logs an error to the console, or throws one, on load or later —
 * the pages of the test's own context and of every context it opens itself. A test that
 * provokes an error on purpose (a page that answers 404, a refused form) names it with
 * `test.use({ consoleErrorsAllowed: /…/ })`.
 */
type ConsoleOptions = { consoleErrorsAllowed: RegExp | null; consoleGuard: void };

export const test = base.extend<ConsoleOptions>({
  consoleErrorsAllowed: [null, { option: true }],
  consoleGuard: [
    async ({ browser, context, consoleErrorsAllowed }, use, testInfo) => {
      const logged: Logged[] = [];
      const watch = (watched: import("@playwright/test").BrowserContext) => {
        watched.on("console", (message) => {
          if (message.type() === "error") {
            logged.push({ text: message.text(), url: message.page()?.url() ?? "" });
          }
        });
        watched.on("weberror", (error) => {
          logged.push({ text: String(error.error()), url: error.page()?.url() ?? "" });
        });
      };
      watch(context);
      const newContext = browser.newContext.bind(browser);
      browser.newContext = async (...args) => {
        const opened = await newContext(...args);
        watch(opened);
        return opened;
      };
      await use();
      browser.newContext = newContext;
      const unexpected = logged.filter(
        (entry) => !(consoleErrorsAllowed?.test(entry.text) ?? false),
      );
      if (unexpected.length > 0 && testInfo.status === testInfo.expectedStatus) {
        throw new Error(
          "console errors:\n" + unexpected.map((e) => `  ${e.url}: ${e.text}`).join("\n"),
        );
      }
    },
    { auto: true },
  ],
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
