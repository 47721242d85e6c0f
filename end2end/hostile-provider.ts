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
// - contains "hostile hang": an answer streamed up to its middle, after which the server writes
//   nothing more and keeps the connection open (until the client closes it);
// - anything else: an answer made of the payloads.
//
// A request that asks to stream (`stream: true`) is answered with server-sent events, as OpenAI
// streams: the text and each call's arguments cut into pieces of a few characters (through the
// payloads' markup), usage in the last chunk, then `[DONE]`. `GET /stats` says how many streams
// the client closed before their end (a cancelled run drops its provider connection).
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

/** `text` in pieces of `size` characters. */
function pieces(text: string, size: number): string[] {
  const out: string[] = [];
  for (let i = 0; i < text.length; i += size) out.push(text.slice(i, i + size));
  return out;
}

type Completion = ReturnType<typeof completion>;

/** The chunks (as `data:` JSON) a streaming OpenAI server sends for `body`. */
function chunks(body: Completion): object[] {
  const { message, finish_reason } = body.choices[0] as {
    message: { content?: string | null; tool_calls?: { id: string; function: { name: string; arguments: string } }[] };
    finish_reason: string;
  };
  const chunk = (delta: object, finish: string | null = null) => ({
    id: body.id,
    object: "chat.completion.chunk",
    created: 0,
    model: body.model,
    choices: [{ index: 0, delta, finish_reason: finish }],
  });
  const out: object[] = [chunk({ role: "assistant" })];
  for (const text of pieces(message.content ?? "", 7)) out.push(chunk({ content: text }));
  (message.tool_calls ?? []).forEach((call, index) => {
    out.push(chunk({ tool_calls: [{ index, id: call.id, type: "function", function: { name: call.function.name, arguments: "" } }] }));
    for (const part of pieces(call.function.arguments, 5)) {
      out.push(chunk({ tool_calls: [{ index, function: { arguments: part } }] }));
    }
  });
  out.push(chunk({}, finish_reason));
  out.push({ id: body.id, object: "chat.completion.chunk", created: 0, model: body.model, choices: [], usage: body.usage });
  return out;
}

let closedEarly = 0;

/** Writes `body` as a stream of events; with `hang`, stops halfway and keeps the connection. */
function stream(response: http.ServerResponse, body: Completion, hang: boolean) {
  response.writeHead(200, { "content-type": "text/event-stream", "cache-control": "no-cache" });
  response.on("close", () => {
    if (!response.writableFinished) closedEarly += 1;
  });
  const events = chunks(body);
  const upTo = hang ? Math.ceil(events.length / 2) : events.length;
  for (const event of events.slice(0, upTo)) response.write(`data: ${JSON.stringify(event)}\n\n`);
  if (!hang) response.end("data: [DONE]\n\n");
}

/** Starts the server; resolves once it listens. */
export function startHostileProvider(): Promise<http.Server> {
  const server = http.createServer((request, response) => {
    if (request.method === "GET" && request.url === "/stats") {
      response.writeHead(200, { "content-type": "application/json" });
      response.end(JSON.stringify({ streams_closed_early: closedEarly }));
      return;
    }
    let body = "";
    request.on("data", (chunk) => (body += chunk));
    request.on("end", () => {
      let messages: Message[] = [];
      let streaming = false;
      try {
        const parsed = JSON.parse(body);
        messages = parsed.messages ?? [];
        streaming = parsed.stream === true;
      } catch {
        // An unreadable request gets the plain answer.
      }
      const reply = answer(messages);
      if (streaming && reply.status === 200) {
        const prompt = messages.find((m) => m.role === "user")?.content ?? "";
        stream(response, reply.body as Completion, prompt.includes("hostile hang"));
        return;
      }
      response.writeHead(reply.status, { "content-type": "application/json" });
      response.end(JSON.stringify(reply.body));
    });
  });
  return new Promise((resolve, reject) => {
    server.once("error", reject);
    server.listen(HOSTILE_PORT, "127.0.0.1", () => resolve(server));
  });
}
