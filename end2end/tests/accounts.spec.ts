import { Page } from "@playwright/test";
import { test, expect, USER_PASSWORD } from "../fixtures";
import { waitFor } from "../helpers";

// Who may approve, in the browser: alice starts a run under four-eyes and cannot decide it; bert
// approves it; the run shows bert as the decider; logging out ends the session. With JavaScript
// on and off.

async function logIn(page: Page, name: string) {
  await page.goto("/runs");
  await expect(page).toHaveURL(/\/login\?next=%2Fruns$/);
  await page.getByLabel("Name").fill(name);
  await page.getByLabel("Password").fill(USER_PASSWORD);
  await page.getByTestId("log-in").click();
  await expect(page).toHaveURL(/\/runs$/);
  await expect(page.getByTestId("who")).toHaveText(`${name} (approver)`);
}

for (const javaScript of [true, false]) {
  test.describe(`JavaScript ${javaScript ? "on" : "off"}`, () => {
    test.use({ javaScriptEnabled: javaScript, storageState: { cookies: [], origins: [] } });

    test("four-eyes: the starter cannot decide, another approver can, and is shown as the decider", async ({
      page,
    }) => {
      await logIn(page, "alice");
      await page.goto("/");
      await page.getByLabel("Prompt", { exact: true }).fill(`Create a page reviewed${javaScript ? "on" : "off"} titled "Four eyes"`);
      await page.getByLabel("Model configuration").selectOption("reviewed");
      await page.getByTestId("start-run").click();
      await page.waitForURL(/\/runs\/[0-9a-f-]{36}$/);
      const runUrl = page.url();
      await waitFor(page, "approval-panel", !javaScript);
      await expect(page.getByTestId("cannot-decide")).toHaveText(
        "Four-eyes: alice started this run, so another approver must decide it.",
      );
      await expect(page.getByRole("button", { name: /Approve all/ })).toHaveCount(0);

      await page.getByTestId("log-out").click();
      await expect(page).toHaveURL(/\/login$/);
      // The session is over: the run page asks to log in again.
      await page.goto(runUrl);
      await expect(page).toHaveURL(/\/login\?next=/);

      await logIn(page, "bert");
      await page.goto(runUrl);
      await expect(page.getByTestId("cannot-decide")).toHaveCount(0);
      await page.getByRole("button", { name: "Approve all (a)" }).click();
      await waitFor(page, "final-answer", !javaScript);
      await expect(page.getByTestId("summary")).toContainText("approved by bert");
      await expect(page.getByText(/started .* by alice$/)).toBeVisible();
      await page.getByTestId("log-out").click();
      await expect(page).toHaveURL(/\/login$/);
    });

    test("a wrong password is refused with a clear message and no session", async ({ page }) => {
      await page.goto("/login");
      await page.getByLabel("Name").fill("alice");
      await page.getByLabel("Password").fill("not her password");
      await page.getByTestId("log-in").click();
      await expect(page.getByTestId("error-banner")).toHaveText("The name or the password is wrong.");
      await page.goto("/runs");
      await expect(page).toHaveURL(/\/login\?next=/);
    });
  });
}
