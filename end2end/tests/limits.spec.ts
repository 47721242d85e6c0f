import { test, expect } from "../fixtures";

// Bounded resources, as a client meets them: a body over the cap is 413, a field over its limit
// is 400 naming the field, and a step stream is only held open for a run that is running.

test("a body over the server's cap is refused with 413", async ({ request }) => {
  const response = await request.post("/api/nrllm_tool_run", {
    headers: { "content-type": "application/json" },
    data: JSON.stringify({ prompt: "x".repeat(2 * 1024 * 1024) }),
  });
  expect(response.status()).toBe(413);
});

test("fields over their limits are refused naming the field", async ({ request }) => {
  for (const [field, value] of [
    ["system_prompt", "s".repeat(20_001)],
    ["skills", `name\n${"k".repeat(50_001)}`],
  ] as const) {
    const response = await request.post("/api/nrllm_tool_run", { data: { prompt: "List the pages", [field]: value } });
    expect(response.status(), field).toBe(400);
    expect(JSON.stringify(await response.json())).toContain(field);
  }
  const tools = Array.from({ length: 201 }, (_, i) => `tool_${i}`);
  const response = await request.post("/api/nrllm_tool_run", { data: { prompt: "List the pages", tools } });
  expect(response.status()).toBe(400);
  expect(JSON.stringify(await response.json())).toContain("tools");
});

test("a step stream is 404 for an unknown run, and replays and ends for a finished one", async ({ request }) => {
  const unknown = await request.get("/api/runs/00000000-0000-7000-8000-000000000009/events");
  expect(unknown.status()).toBe(404);
  const started = await request.post("/api/nrllm_tool_run", { data: { prompt: "What time is it?" } });
  const runId: string = await started.json();
  for (let i = 0; i < 60; i++) {
    const view = await (await request.post("/api/nrllm_run_get", { data: { run_id: runId } })).json();
    if (view.summary.status === "completed") break;
    await new Promise((r) => setTimeout(r, 100));
  }
  // The response ends by itself: a finished run holds no stream open.
  const stream = await request.get(`/api/runs/${runId}/events`, { timeout: 10_000 });
  expect(stream.status()).toBe(200);
  const text = await stream.text();
  expect(text).toContain("event: step");
  expect(text).toContain("event: status\ndata: completed");
});
