import { test, expect } from "../fixtures";

// The form shows the chosen configuration's own defaults; empty fields mean "the configuration's
// default"; a value typed in wins; the run page says which values were used and from where.

test.describe("with JavaScript", () => {
  test("the temperature and token fields follow the chosen configuration", async ({ page }) => {
    await page.goto("/");
    // The island follows the choice once the page's wasm has loaded.
    await page.waitForLoadState("networkidle");
    const temperature = page.getByTestId("temperature");
    const tokens = page.getByTestId("max-tokens");
    await expect(temperature).toHaveValue("");
    await expect(temperature).toHaveAttribute("placeholder", "the provider's default");
    await page.locator("#configuration").selectOption("tuned");
    await expect(temperature).toHaveAttribute("placeholder", "0.7 (its default)");
    await expect(tokens).toHaveAttribute("placeholder", "512 (its default)");
    await page.locator("#configuration").selectOption("demo");
    await expect(temperature).toHaveAttribute("placeholder", "the provider's default");

    await page.locator("#configuration").selectOption("tuned");
    await page.locator("#prompt").fill("What time is it?");
    await tokens.fill("300");
    await page.getByTestId("start-run").click();
    await expect(page).toHaveURL(/\/runs\//);
    await expect(page.getByTestId("model-options")).toHaveText(
      "temperature 0.7 (configuration) · max tokens 300 (form) · max rounds 5",
    );
  });
});

test.describe("without JavaScript", () => {
  test.use({ javaScriptEnabled: false });

  test("empty fields take the configuration's defaults", async ({ page }) => {
    await page.goto("/");
    await page.locator("#configuration").selectOption("tuned");
    await page.locator("#prompt").fill("What time is it?");
    await page.getByTestId("start-run").click();
    await expect(page).toHaveURL(/\/runs\//);
    await expect(page.getByTestId("model-options")).toHaveText(
      "temperature 0.7 (configuration) · max tokens 512 (configuration) · max rounds 5",
    );
  });
});
