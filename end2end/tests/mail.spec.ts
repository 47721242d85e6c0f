import { request as playwrightRequest } from "@playwright/test";
import { expect, test, USER_PASSWORD } from "../fixtures";
import { runView, startWaiting } from "../helpers";
import { mailsTo } from "../mail-server";

// Approving from a mail (issue 42): a run of the `mailed` configuration (four-eyes, mails alice)
// is mailed to alice through the suite's real SMTP server (end2end/mail-server.ts) with signed
// Approve and Deny links. Opening a link decides nothing (mail scanners fetch links); a browser
// logged in as someone else is told so and decides nothing; alice, after logging in, confirms
// with one press, with JavaScript on and off. A used link decides nothing more.

const ALICE = "alice@example.test";

/** The mail to alice about run `runId`, once it arrived. */
async function mailAbout(runId: string) {
  let found: Awaited<ReturnType<typeof mailsTo>>[number] | undefined;
  await expect
    .poll(
      async () => {
        found = (await mailsTo(ALICE)).find((mail) => (mail.text ?? "").includes(runId));
        return found !== undefined;
      },
      { timeout: 15_000 },
    )
    .toBe(true);
  return found!;
}

/** The link after `label:` in a mail's text. */
function link(text: string, label: string): string {
  const line = text.split("\n").find((l) => l.startsWith(`${label}: `));
  if (!line) throw new Error(`no ${label} link in:\n${text}`);
  return line.slice(label.length + 2).trim();
}

test.beforeAll(async ({ request }) => {
  const set = await request.post("/api/nrllm_user_contact", { data: { name: "alice", email: ALICE } });
  expect(set.status()).toBe(200);
});

for (const javaScript of [true, false]) {
  test.describe(`decision links in a mail, JavaScript ${javaScript ? "on" : "off"}`, () => {
    test.use({ javaScriptEnabled: javaScript });

    test("the recipient confirms once after logging in; nobody else and no GET decides", async ({
      page,
      browser,
      request,
    }) => {
      const verdict = javaScript ? "Approve" : "Deny";
      const slug = `mailed-${javaScript ? "js" : "nojs"}-${Date.now() % 1_000_000}`;
      const { runId } = await startWaiting(request, `Create a page ${slug} titled "Mailed"`, "mailed");
      const mail = await mailAbout(runId);
      expect(mail.subject).toContain("waits for your decision: create_page");
      expect(mail.from?.text).toContain("nrllm@example.test");
      expect(mail.text).toContain(slug);
      expect(mail.html).toContain("<a href=");
      const url = new URL(link(mail.text!, verdict));
      expect(url.pathname).toBe("/decide");
      expect(link(mail.text!, "Open the run")).toContain(`/runs/${runId}`);
      const target = url.pathname + url.search;

      // The operator (who started it, and is not alice) is told the link is not theirs.
      const opened = await page.goto(target);
      expect(opened!.headers()["referrer-policy"]).toBe("no-referrer");
      await expect(page.getByTestId("link-blocked")).toContainText("This link was sent to alice, and you are logged in as operator");
      await expect(page.getByTestId("link-confirm")).toHaveCount(0);
      expect((await runView(request, runId)).summary.status).toBe("waiting_for_approval");

      // A browser without a session logs in first, as alice, and lands back on the link.
      const context = await browser.newContext({ javaScriptEnabled: javaScript, storageState: { cookies: [], origins: [] } });
      const alice = await context.newPage();
      await alice.goto(target);
      await alice.waitForURL(/\/login\?next=/);
      await alice.getByLabel("Name").fill("alice");
      await alice.getByLabel("Password").fill(USER_PASSWORD);
      await alice.getByTestId("log-in").click();
      await alice.waitForURL(/\/decide\?token=/);
      await expect(alice.getByTestId("link-summary")).toContainText("It was sent to alice; you are logged in as alice");
      await expect(alice.getByTestId("link-call")).toContainText("create_page");
      // Every GET so far decided nothing.
      expect((await runView(request, runId)).summary.status).toBe("waiting_for_approval");

      await alice.getByTestId("link-confirm").click();
      await alice.waitForURL(new RegExp(`/runs/${runId}$`));
      await expect.poll(async () => (await runView(request, runId)).summary.status, { timeout: 15_000 }).toBe("completed");
      const decided = await runView(request, runId);
      expect(decided.summary.decided_by).toBe("alice");
      expect(decided.summary.decision).toContain(javaScript ? "approved by alice" : "denied by alice");
      // The run page records the mail. The confirmation landed on it; with JavaScript it
      // reloads itself when the run's status changes, so a navigation of ours could cross that
      // reload: it is read where it is once it shows the run completed.
      if (!javaScript) await alice.goto(`/runs/${runId}`);
      await expect(alice.getByTestId("status")).toHaveText("Completed");
      await expect(alice.getByTestId("notification")).toContainText("mail to alice: sent at");

      // The link decides once: opened again, it says so.
      await alice.goto(target);
      await expect(alice.getByTestId("link-blocked")).toContainText("This link decided already");
      await context.close();
    });
  });
}

test("a link whose token was changed is refused, and a press by anyone but its recipient decides nothing", async ({ page, request, baseURL }) => {
  const { runId } = await startWaiting(request, `Create a page mailed-forged-${Date.now() % 1_000_000} titled "F"`, "mailed");
  const mail = await mailAbout(runId);
  const url = new URL(link(mail.text!, "Approve"));
  const token = url.searchParams.get("token")!;
  const forged = token.slice(0, -4) + (token.endsWith("aaaa") ? "bbbb" : "aaaa");
  await page.goto(`/decide?token=${encodeURIComponent(forged)}`);
  await expect(page.getByTestId("link-error")).toContainText("This link is not one this server made");

  // Through the API, as the operator (not alice): refused, nothing decided.
  const as = await playwrightRequest.newContext({ baseURL, storageState: { cookies: [], origins: [] } });
  await as.post("/api/nrllm_login", { data: { name: "bert", password: USER_PASSWORD } });
  const csrf = (await as.storageState()).cookies.find((c) => c.name === "nrllm_csrf")!.value;
  const refused = await as.post("/api/nrllm_link_decide", { data: { token }, headers: { "x-csrf-token": csrf } });
  expect(refused.status()).toBe(403);
  expect(await refused.text()).toContain("This link was sent to alice");
  await as.dispose();
  expect((await runView(request, runId)).summary.status).toBe("waiting_for_approval");
});

test.describe("addresses on /admin, JavaScript off", () => {
  test.use({ javaScriptEnabled: false });

  test("an administrator gives a user an email and a Slack identity, one user's only", async ({ page }) => {
    await page.goto("/admin");
    const bert = page.locator('[data-testid="user"][data-name="bert"]');
    await bert.getByLabel("Email of bert").fill("bert@example.test");
    await bert.getByLabel("Slack team id of bert").fill("T0E2E");
    await bert.getByLabel("Slack user id of bert").fill("U0BERT");
    await bert.getByTestId("save-contact").click();
    await page.waitForURL(/\/admin$/);
    await expect(bert.getByLabel("Email of bert")).toHaveValue("bert@example.test");
    await expect(bert.getByLabel("Slack user id of bert")).toHaveValue("U0BERT");

    // The same Slack user for alice: refused, naming whose it is; alice keeps none.
    const alice = page.locator('[data-testid="user"][data-name="alice"]');
    await alice.getByLabel("Slack team id of alice").fill("T0E2E");
    await alice.getByLabel("Slack user id of alice").fill("U0BERT");
    await alice.getByTestId("save-contact").click();
    await expect(page.getByTestId("error-banner")).toContainText("it is bert's");
    await page.goto("/admin");
    await expect(alice.getByLabel("Slack user id of alice")).toHaveValue("");
    await expect(alice.getByLabel("Email of alice")).toHaveValue("alice@example.test");
  });
});

test.describe("a link pressed too late, JavaScript off", () => {
  test.use({ javaScriptEnabled: false });

  test("a press after someone else decided comes back to the link's page, which says so", async ({ browser, request }) => {
    const { runId, view } = await startWaiting(request, `Create a page mailed-late-${Date.now() % 1_000_000} titled "L"`, "mailed");
    const mail = await mailAbout(runId);
    const url = new URL(link(mail.text!, "Approve"));
    const context = await browser.newContext({ javaScriptEnabled: false, storageState: { cookies: [], origins: [] } });
    const alice = await context.newPage();
    await alice.goto("/login");
    await alice.getByLabel("Name").fill("alice");
    await alice.getByLabel("Password").fill(USER_PASSWORD);
    await alice.getByTestId("log-in").click();
    await alice.goto(url.pathname + url.search);
    await expect(alice.getByTestId("link-confirm")).toBeVisible();
    // Meanwhile bert denies it on the page's API.
    const bert = await playwrightRequest.newContext({ baseURL: new URL(url.href).origin, storageState: { cookies: [], origins: [] } });
    await bert.post("/api/nrllm_login", { data: { name: "bert", password: USER_PASSWORD } });
    const csrf = (await bert.storageState()).cookies.find((c) => c.name === "nrllm_csrf")!.value;
    const denied = await bert.post("/api/nrllm_tool_resume", {
      data: { run_id: runId, decision: "deny_all", digest: view.digest },
      headers: { "x-csrf-token": csrf },
    });
    expect(denied.status()).toBe(200);
    await bert.dispose();
    // alice's press comes back to the link's page, with why nothing was decided.
    await alice.getByTestId("link-confirm").click();
    await alice.waitForURL(/\/decide\?token=/);
    await expect(alice.getByTestId("error-banner")).toContainText("already decided");
    await expect(alice.getByTestId("link-blocked")).toBeVisible();
    await expect.poll(async () => (await runView(request, runId)).summary.decided_by, { timeout: 15_000 }).toBe("bert");
    await context.close();
  });
});
