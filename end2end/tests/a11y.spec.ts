import AxeBuilder from "@axe-core/playwright";
import { Page } from "@playwright/test";
import { test, expect } from "../fixtures";
import { startWaiting } from "../helpers";

// Every page checked with axe-core: no serious or critical violation (WCAG 2.1 A and AA rules),
// with JavaScript on, in the states an operator meets (a run waiting with its panel, the inbox
// with a panel open, the key list shown) and logged out.

/** The serious and critical violations axe finds on the page as it is now, one line each. */
async function violations(page: Page): Promise<string[]> {
  const results = await new AxeBuilder({ page })
    .withTags(["wcag2a", "wcag2aa", "wcag21a", "wcag21aa"])
    .analyze();
  return results.violations
    .filter((v) => v.impact === "serious" || v.impact === "critical")
    .map((v) => `${v.id} (${v.impact}): ${v.help} — ${v.nodes.map((n) => n.target.join(" ")).join(", ")}`);
}

test("no page has a serious or critical accessibility violation", async ({ page, request, browser }) => {
  // Ten pages, each loaded and scanned by axe: 22 s on a quiet machine, over the default 30 s
  // on a busy one (a ci-local run timed out twice in axe's scan).
  test.setTimeout(90_000);
  const { runId } = await startWaiting(request, 'Change the body of the home page to "axe"');
  const found: string[] = [];
  for (const path of ["/", "/runs", `/runs/${runId}`, "/approvals", "/rules", "/system", "/account", "/admin"]) {
    await page.goto(path);
    await page.waitForLoadState("networkidle");
    found.push(...(await violations(page)).map((v) => `${path}: ${v}`));
  }
  // The inbox with a panel open in place and the keys listed.
  await page.goto(`/approvals?open=${runId}#row-${runId}`);
  await expect(page.getByTestId("approval-panel")).toBeVisible();
  await page.waitForLoadState("networkidle");
  await expect(page.getByTestId("key-help")).toBeVisible();
  await page.keyboard.press("?");
  await expect(page.getByTestId("key-help")).toHaveAttribute("open", "");
  found.push(...(await violations(page)).map((v) => `inbox, open: ${v}`));
  const anonymous = await (await browser.newContext({ storageState: { cookies: [], origins: [] } })).newPage();
  await anonymous.goto("/login");
  await anonymous.waitForLoadState("networkidle");
  found.push(...(await violations(anonymous)).map((v) => `/login: ${v}`));
  await anonymous.context().close();
  expect(found, found.join("\n")).toEqual([]);
});
