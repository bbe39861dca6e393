// The Vercel AI SDK (npm "ai" 7.x) against a uamp AI SDK endpoint, as
// tests/interop/test_ai_sdk_client.py drives it.
//
// node run.mjs MODE URL ARGS_JSON
//   stream: DefaultChatTransport.sendMessages + readUIMessageStream for one
//           user message (ARGS_JSON: {chatId, text, body}); prints the
//           chunks as the SDK validated them and the final message.
//   chat:   a Chat (AbstractChat with a plain state, as useChat keeps one)
//           that sends ARGS_JSON.text, runs the client tools it is asked for
//           (onToolCall + addToolOutput) and resends automatically when the
//           last step's tool calls are complete; prints the messages and
//           every request body it POSTed.
//   resume: a Chat that sends ARGS_JSON.text, stops reading after the first
//           text delta (its fetch aborted), then resumeStream(); prints the
//           messages after the resume and the chunks of each stream.
// Every console.warn / console.error and every error the SDK reports is
// printed too: the tests expect none.
import {
  AbstractChat,
  DefaultChatTransport,
  lastAssistantMessageIsCompleteWithToolCalls,
  readUIMessageStream,
} from "ai";

const [mode, url, argsJson] = process.argv.slice(2);
const args = JSON.parse(argsJson ?? "{}");
const warnings = [];
const errors = [];
for (const level of ["warn", "error"]) {
  console[level] = (...items) => warnings.push(items.map(String).join(" "));
}
globalThis.AI_SDK_LOG_WARNINGS = (w) => warnings.push(JSON.stringify(w));

const requests = [];
const chunksSeen = [];
async function recordingFetch(input, init) {
  requests.push({ method: init?.method ?? "GET", url: String(input), body: init?.body ? JSON.parse(init.body) : null });
  return fetch(input, init);
}

function transport() {
  return new DefaultChatTransport({ api: url, fetch: recordingFetch, body: args.body ?? {} });
}

class State {
  constructor() {
    this.status = "ready";
    this.error = undefined;
    this.messages = [];
  }
  pushMessage(m) { this.messages = [...this.messages, m]; }
  popMessage() { this.messages = this.messages.slice(0, -1); }
  replaceMessage(i, m) { this.messages = this.messages.map((x, n) => (n === i ? m : x)); }
  snapshot(thing) { return structuredClone(thing); }
}

class Chat extends AbstractChat {
  constructor(options) {
    super({ ...options, state: new State() });
  }
}

// A stream that records what passes through it.
function tap(stream, into) {
  return stream.pipeThrough(new TransformStream({
    transform(chunk, controller) { into.push(chunk); controller.enqueue(chunk); },
  }));
}

async function streamMode() {
  const t = transport();
  const user = { id: "u1", role: "user", parts: [{ type: "text", text: args.text }] };
  const stream = await t.sendMessages({
    chatId: args.chatId, messages: [user], trigger: "submit-message", messageId: undefined, abortSignal: undefined,
  });
  let message;
  for await (const m of readUIMessageStream({ stream: tap(stream, chunksSeen), onError: (e) => errors.push(String(e)) })) {
    message = m;
  }
  return { chunks: chunksSeen, message };
}

async function chatMode() {
  const clientTools = new Set((args.body?.tools ?? []).map((t) => t.function.name));
  let chat;
  chat = new Chat({
    id: args.chatId,
    transport: transport(),
    sendAutomaticallyWhen: lastAssistantMessageIsCompleteWithToolCalls,
    onError: (e) => errors.push(String(e)),
    async onToolCall({ toolCall }) {
      if (toolCall.dynamic || !clientTools.has(toolCall.toolName)) return;
      // The app's tool: run it here, hand its output back.
      chat.addToolOutput({
        tool: toolCall.toolName,
        toolCallId: toolCall.toolCallId,
        output: `sunny in ${toolCall.input.city}`,
      });
    },
  });
  await chat.sendMessage({ text: args.text });
  // The automatic resend runs after sendMessage returned: wait until it is done.
  for (let i = 0; i < 200 && (chat.status !== "ready" || requests.length < (args.requests ?? 1)); i++) {
    await new Promise((r) => setTimeout(r, 50));
  }
  await new Promise((r) => setTimeout(r, 300)); // no further request may follow
  return { messages: chat.messages, requests, status: chat.status };
}

async function resumeMode() {
  let stopped = false;
  let chat;
  const firstChunks = [];
  chat = new Chat({
    id: args.chatId,
    transport: transport(),
    onError: (e) => errors.push(String(e)),
  });
  const unsubscribe = setInterval(() => {
    const last = chat.messages.at(-1);
    if (!stopped && last?.role === "assistant" && last.parts.some((p) => p.type === "text" && p.text)) {
      stopped = true;
      firstChunks.push(structuredClone(last));
      chat.stop(); // aborts the fetch: the server's answer must go on
    }
  }, 5);
  await chat.sendMessage({ text: args.text });
  clearInterval(unsubscribe);
  const before = structuredClone(chat.messages);
  await chat.resumeStream();
  const after = structuredClone(chat.messages);
  // A second resume once the answer is over: nothing to resume (204).
  await chat.resumeStream();
  return { before, after, final: chat.messages, requests, status: chat.status, stoppedAt: firstChunks };
}

let result;
if (mode === "stream") result = await streamMode();
else if (mode === "chat") result = await chatMode();
else if (mode === "resume") result = await resumeMode();
else throw new Error(`unknown mode ${mode}`);
console.log(JSON.stringify({ ...result, warnings, errors }));
