import { APIRequestContext, Page } from "@playwright/test";
import { test, expect } from "../fixtures";
import { runApproved, runView, startWaiting } from "../helpers";

// The inbox as a queue an operator clears: triage by keyboard alone, the same by links and
// forms without JavaScript, and bulk decisions where each run is still claimed on its own.

/** A word no other test's prompt holds, so that the inbox can be filtered to this test's runs. */
function word(name: string): string {
  return `${name}${test.info().retry}x${Date.now() % 1_000_000}`;
}

/** Starts `count` runs that wait for approval, their prompts holding `tag`: each creates a page
 * of its own (runs changing one page would change each other's previews as they are decided). */
async function waiting(request: APIRequestContext, tag: string, count: number): Promise<string[]> {
  const ids: string[] = [];
  for (let n = 1; n <= count; n++) {
    const { runId } = await startWaiting(request, `Create a page ${tag}-${n} titled "${tag} ${n}"`);
    ids.push(runId);
  }
  return ids;
}

/** Waits until the inbox's script has started (the keys work from then on). */
async function hydrated(page: Page) {
  await expect(page.getByTestId("key-help")).toBeVisible();
}

/** Opens the inbox filtered to `tag` once the search index holds all `count` runs. */
async function inboxOf(page: Page, tag: string, count: number) {
  await page.goto(`/approvals?q=${tag}`);
  await expect(async () => {
    await page.reload();
    await expect(page.getByTestId("inbox-item")).toHaveCount(count, { timeout: 500 });
  }).toPass({ timeout: 15_000 });
}

/** Waits until every run of `ids` completed, and returns their verdicts. */
async function verdicts(request: APIRequestContext, ids: string[]): Promise<string[]> {
  const found: string[] = [];
  for (const id of ids) {
    await expect
      .poll(async () => (await runView(request, id)).summary.status, { timeout: 15_000 })
      .toBe("completed");
    found.push((await runView(request, id)).summary.decision ?? "");
  }
  return found;
}

test.describe("triage, JavaScript on", () => {
  test("five waiting turns cleared by keyboard alone", async ({ page, request }) => {
    const tag = word("triage");
    const ids = await waiting(request, tag, 5);
    await inboxOf(page, tag, 5);
    const rows = page.getByTestId("inbox-item");
    const open = page.locator('[data-panel-toggle][aria-expanded="true"]');

    await page.getByTestId("start-triage").focus();
    await page.keyboard.press("Enter");
    await expect(open).toHaveCount(1);
    await hydrated(page);
    await expect(rows.first().getByTestId("approval-panel")).toBeVisible();
    // Focus lands on the open panel.
    await expect(rows.first().locator("[data-panel-heading]")).toBeFocused();

    // j and k move between turns, one panel open at a time; ? lists the keys.
    await page.keyboard.press("j");
    await expect(rows.nth(1).getByTestId("inbox-prompt")).toHaveAttribute("aria-expanded", "true");
    await expect(rows.first().getByTestId("inbox-prompt")).toHaveAttribute("aria-expanded", "false");
    await expect(rows.nth(1).getByTestId("approval-panel")).toBeVisible();
    await page.keyboard.press("k");
    await expect(rows.first().getByTestId("inbox-prompt")).toHaveAttribute("aria-expanded", "true");
    await expect(rows.first().getByTestId("approval-panel")).toBeVisible();
    await page.keyboard.press("?");
    await expect(page.getByTestId("key-help")).toHaveAttribute("open", "");
    await expect(page.getByTestId("key-help")).toContainText("approve all of the open turn");
    await page.keyboard.press("?");
    await expect(page.getByTestId("key-help")).not.toHaveAttribute("open", "");

    // 1: a approves; the next turn opens by itself.
    await rows.first().locator("[data-panel-heading]").focus();
    await page.keyboard.press("a");
    await expect(rows).toHaveCount(4);
    await expect(open).toHaveCount(1);
    await hydrated(page);

    // 2: r focuses the reason, where a letter is only typed; Tab leaves it, then a decides.
    await expect(page.locator("[data-panel-heading]")).toBeFocused();
    await page.keyboard.press("r");
    const reason = page.locator('[data-panel] input[name="reason"]');
    await expect(reason).toBeFocused();
    await page.keyboard.press("a");
    await expect(reason).toHaveValue("a");
    await expect(rows).toHaveCount(4);
    await page.keyboard.press("Backspace");
    await page.keyboard.press("Tab");
    await page.keyboard.press("a");
    await expect(rows).toHaveCount(3);
    await hydrated(page);

    // 3: e edits the first call's arguments; Escape goes back to the panel.
    await page.keyboard.press("e");
    const edit = page.locator("[data-panel] textarea[name$='[arguments]']").first();
    await expect(edit).toBeFocused();
    await page.keyboard.press("Escape");
    await expect(page.locator("[data-panel-heading]")).toBeFocused();
    await page.keyboard.press("a");
    await expect(rows).toHaveCount(2);
    await hydrated(page);

    // 4 and 5: one approved, the last denied.
    await page.keyboard.press("a");
    await expect(rows).toHaveCount(1);
    await hydrated(page);
    await page.keyboard.press("d");
    await expect(page.getByTestId("inbox-empty")).toBeVisible();

    const decided = await verdicts(request, ids);
    expect(decided.filter((d) => d.startsWith("approved by operator"))).toHaveLength(4);
    expect(decided.filter((d) => d.startsWith("denied by operator"))).toHaveLength(1);
  });

  test("single-key shortcuts can be turned off", async ({ page, request }) => {
    const tag = word("keysoff");
    await waiting(request, tag, 2);
    await inboxOf(page, tag, 2);
    await hydrated(page);
    await page.keyboard.press("?");
    const switchOn = page.getByLabel(/^Single-key shortcuts on/);
    await expect(switchOn).toBeChecked();
    await switchOn.uncheck();
    await page.keyboard.press("?");
    await page.locator("h1").click();
    await page.keyboard.press("j");
    await expect(page.locator('[data-panel-toggle][aria-expanded="true"]')).toHaveCount(0);
    // Kept in this browser: still off after a reload.
    await page.reload();
    await hydrated(page);
    await page.keyboard.press("j");
    await expect(page.locator('[data-panel-toggle][aria-expanded="true"]')).toHaveCount(0);
  });
});

test.describe("triage, JavaScript off", () => {
  test.use({ javaScriptEnabled: false });

  test("the same decisions by links and forms", async ({ page, request }) => {
    const tag = word("nojstriage");
    const ids = await waiting(request, tag, 5);
    await inboxOf(page, tag, 5);
    const rows = page.getByTestId("inbox-item");
    await page.getByTestId("start-triage").click();
    await expect(page).toHaveURL(/open=/);
    for (let left = 5; left > 1; left--) {
      await expect(rows).toHaveCount(left);
      const opened = rows.filter({ has: page.getByTestId("approval-panel") });
      await expect(opened).toHaveCount(1);
      await opened.getByRole("button", { name: "Approve all (a)" }).click();
      // The next oldest turn's panel, in the same filtered inbox.
      await expect(page).toHaveURL(new RegExp(`q=${tag}.*open=`));
    }
    await rows.getByRole("button", { name: "Deny all (d)" }).click();
    await expect(page.getByTestId("inbox-empty")).toBeVisible();
    const decided = await verdicts(request, ids);
    expect(decided.filter((d) => d.startsWith("approved by operator"))).toHaveLength(4);
    expect(decided.filter((d) => d.startsWith("denied by operator"))).toHaveLength(1);
  });
});

test.describe("bulk decisions", () => {
  test("a bulk approval refuses only the run that changed since it was seen", async ({ page, request }) => {
    const tag = word("bulk");
    const slug = `bulk-${test.info().retry}-${Date.now() % 1_000_000}`;
    await runApproved(request, `Create a page ${slug} titled "Original"`);
    const { runId: renamed } = await startWaiting(request, `Rename the ${slug} page to "${tag} seen"`);
    const others = await waiting(request, tag, 2);
    await inboxOf(page, tag, 3);
    await hydrated(page);
    const rows = page.getByTestId("inbox-item");
    const picks = page.getByTestId("inbox-pick");
    // Not pickable before its panel was seen.
    await expect(picks.first()).toBeDisabled();
    for (let n = 0; n < 3; n++) {
      await rows.nth(n).getByTestId("inbox-prompt").click();
      await expect(rows.nth(n).getByTestId("approval-panel")).toBeVisible();
      await picks.nth(n).check();
    }
    // Meanwhile another run changes the page the rename would change.
    await runApproved(request, `Rename the ${slug} page to "Changed meanwhile"`);
    await page.getByRole("button", { name: "Approve picked" }).click();
    const results = page.getByTestId("bulk-result");
    await expect(results).toHaveCount(3);
    await expect(results.filter({ hasText: "Decided" })).toHaveCount(2);
    const refused = results.filter({ hasText: "Refused" });
    await expect(refused).toHaveCount(1);
    await expect(refused).toContainText(`${tag} seen`);
    await expect(refused).toContainText("changed since you looked");
    // The decided rows left the list; the refused one waits, unchanged.
    await expect(rows).toHaveCount(1);
    expect((await runView(request, renamed)).summary.status).toBe("waiting_for_approval");
    expect(await verdicts(request, others)).toEqual([
      expect.stringMatching(/^approved by operator/),
      expect.stringMatching(/^approved by operator/),
    ]);
  });
});
