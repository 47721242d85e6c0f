import { test, expect } from "../fixtures";
import { startRun, waitFor } from "../helpers";

// Defence in depth: every page carries a Content-Security-Policy that lets only the page's own
// nonce'd scripts run, and forbids inline handlers and framing.

const NONCE_POLICY = /script-src 'nonce-([A-Za-z0-9_-]+)' 'strict-dynamic' 'wasm-unsafe-eval'/;

test("pages carry a nonce policy that matches their script, and refuse framing", async ({ page, request }) => {
  const runUrl = await startRun(page, "List the pages");
  // Until the run stops, its page reloads itself when it does; that reload would abort the next
  // navigation below.
  await waitFor(page, "final-answer", false);
  const runPath = new URL(runUrl).pathname;
  for (const path of ["/", runPath, "/approvals", "/runs"]) {
    const response = await page.goto(path);
    const policy = response?.headers()["content-security-policy"] ?? "";
    const match = NONCE_POLICY.exec(policy);
    expect(match, `${path}: ${policy}`).not.toBeNull();
    expect(policy).toContain("frame-ancestors 'none'");
    expect(policy).not.toContain("unsafe-inline");
    // The hydration script carries this response's nonce (the browser hides the attribute's value
    // from the DOM, so read the property).
    const nonces = await page.locator("script[nonce]").evaluateAll((scripts) =>
      scripts.map((s) => (s as HTMLScriptElement).nonce),
    );
    expect(nonces).toContain(match![1]);
    expect(response?.headers()["x-content-type-options"]).toBe("nosniff");
  }
  // Every response gets a fresh nonce.
  const first = (await request.get("/")).headers()["content-security-policy"];
  const second = (await request.get("/")).headers()["content-security-policy"];
  expect(NONCE_POLICY.exec(first)![1]).not.toBe(NONCE_POLICY.exec(second)![1]);
  // HTML without a nonce (a bare error page) allows no script at all.
  const bare = await request.get("/pkg/no-such-file.js");
  if ((bare.headers()["content-type"] ?? "").startsWith("text/html")) {
    expect(bare.headers()["content-security-policy"]).toContain("frame-ancestors 'none'");
  }
});

test.describe("an injected handler", () => {
  // The test injects an image that does not exist with an inline handler: the 404 and the
  // refusal are logged, as they should be.
  test.use({ consoleErrorsAllowed: /Content Security Policy|status of 404/ });

  test("an inline event handler is blocked and reported as a CSP violation", async ({ page }) => {
    let dialogs = 0;
    page.on("dialog", async (dialog) => {
      dialogs++;
      await dialog.dismiss();
    });
    const violations: string[] = [];
    page.on("console", (message) => {
      if (message.text().includes("Content Security Policy")) violations.push(message.text());
    });
    // The page itself runs under the policy: its script loads, nothing is refused (the next test
    // shows the islands working under it).
    await page.goto("/");
    await page.waitForLoadState("networkidle");
    expect(violations).toEqual([]);

    const violated = await page.evaluate(
      () =>
        new Promise<string>((resolve) => {
          document.addEventListener("securitypolicyviolation", (event) => resolve(event.violatedDirective), {
            once: true,
          });
          document.body.insertAdjacentHTML("beforeend", '<img src="/favicon-missing.png" onerror="alert(1)">');
        }),
    );
    expect(violated).toMatch(/^script-src/);
    await page.waitForTimeout(200);
    expect(dialogs).toBe(0);
  });
});

test("the run page works under the policy: live steps and the approval panel", async ({ page }) => {
  const violations: string[] = [];
  page.on("console", (message) => {
    if (message.text().includes("Content Security Policy")) violations.push(message.text());
  });
  await startRun(page, 'Rename the home page to "Policy"');
  await waitFor(page, "approval-panel", false);
  await page.getByRole("button", { name: "Deny all (d)" }).click();
  await waitFor(page, "final-answer", false);
  expect(violations).toEqual([]);
});
