// A model that tries to break the page: a local server speaking the OpenAI chat-completions wire
// format whose every answer, tool-call argument and error message carries markup payloads. The
// e2e server lists it as the configuration `hostile` (end2end/nrllm-e2e.toml).
//
// What it answers, by the first user message:
// - contains "hostile error": HTTP 400 whose error message is the payloads;
// - contains "hostile call <slug>": first a turn with three calls — `create_page` (gated; title
//   and body are payloads), `get_page` with a payload as its slug (the tool refuses it, quoting
//   it) and `list_pages` — then, once the calls are answered, an answer made of the payloads and
//   the tool results;
// - contains "hostile twice <slug>": two turns, each with one gated call (create the page, then
//   rename it), so the run waits for a decision twice; then an answer;
// - anything else: an answer made of the payloads.
import * as http from "node:http";

export const HOSTILE_PORT = 3011;

export const PAYLOADS = [
  "</textarea><img src=x onerror=alert(1)>",
  "</title><script>alert(1)</script>",
  '"><svg onload=alert(1)>',
  "</script><script>alert(1)</script>",
  "javascript:alert(1)",
];

export const ALL_PAYLOADS = PAYLOADS.join(" ");

type Message = { role: string; content?: string | null };

function completion(message: object, finish: string) {
  return {
    id: "chatcmpl-hostile",
    object: "chat.completion",
    created: 0,
    model: "hostile-1",
    choices: [{ index: 0, message: { role: "assistant", ...message }, finish_reason: finish }],
    usage: { prompt_tokens: 10, completion_tokens: 5, total_tokens: 15 },
  };
}

function answer(messages: Message[]): { status: number; body: object } {
  const prompt = messages.find((m) => m.role === "user")?.content ?? "";
  if (prompt.includes("hostile error")) {
    return { status: 400, body: { error: { message: `bad request: ${ALL_PAYLOADS}` } } };
  }
  const results = messages.filter((m) => m.role === "tool").map((m) => m.content ?? "");
  const twice = /hostile twice ([a-z0-9-]+)/.exec(prompt);
  if (twice && results.length < 2) {
    const [name, args] =
      results.length === 0
        ? ["create_page", { slug: twice[1], title: "First" }]
        : ["update_page", { slug: twice[1], title: "Second" }];
    return {
      status: 200,
      body: completion(
        {
          content: null,
          tool_calls: [
            { id: `call_${results.length}`, type: "function", function: { name, arguments: JSON.stringify(args) } },
          ],
        },
        "tool_calls",
      ),
    };
  }
  const call = /hostile call ([a-z0-9-]+)/.exec(prompt);
  if (call && results.length === 0) {
    const slug = call[1];
    return {
      status: 200,
      body: completion(
        {
          content: `I will try this: ${ALL_PAYLOADS}`,
          tool_calls: [
            {
              id: "call_create",
              type: "function",
              function: {
                name: "create_page",
                arguments: JSON.stringify({ slug, title: ALL_PAYLOADS, body: ALL_PAYLOADS }),
              },
            },
            {
              id: "call_get",
              type: "function",
              function: { name: "get_page", arguments: JSON.stringify({ slug: PAYLOADS[0] }) },
            },
            { id: "call_list", type: "function", function: { name: "list_pages", arguments: "{}" } },
          ],
        },
        "tool_calls",
      ),
    };
  }
  return {
    status: 200,
    body: completion({ content: `Done: ${ALL_PAYLOADS}\n${results.join("\n")}` }, "stop"),
  };
}

/** Starts the server; resolves once it listens. */
export function startHostileProvider(): Promise<http.Server> {
  const server = http.createServer((request, response) => {
    let body = "";
    request.on("data", (chunk) => (body += chunk));
    request.on("end", () => {
      let messages: Message[] = [];
      try {
        messages = JSON.parse(body).messages ?? [];
      } catch {
        // An unreadable request gets the plain answer.
      }
      const reply = answer(messages);
      response.writeHead(reply.status, { "content-type": "application/json" });
      response.end(JSON.stringify(reply.body));
    });
  });
  return new Promise((resolve, reject) => {
    server.once("error", reject);
    server.listen(HOSTILE_PORT, "127.0.0.1", () => resolve(server));
  });
}
