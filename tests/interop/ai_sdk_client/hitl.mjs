// A human in the loop with the Vercel AI SDK (npm "ai" 7.x), as
// tests/interop/test_ai_sdk_approval.py drives it: a Chat (AbstractChat, what
// useChat wraps) sends ARGS_JSON.text; when the answer shows a tool part in
// state "approval-requested" the user decides with addToolApprovalResponse
// (ARGS_JSON.approved, .reason), and sendAutomaticallyWhen
// (lastAssistantMessageIsCompleteWithApprovalResponses) sends it back.
// Prints the messages, every request body it POSTed and the SDK's warnings.
//
// node hitl.mjs URL ARGS_JSON
import {
  AbstractChat,
  DefaultChatTransport,
  lastAssistantMessageIsCompleteWithApprovalResponses,
} from "ai";

const [url, argsJson] = process.argv.slice(2);
const args = JSON.parse(argsJson ?? "{}");
const warnings = [];
const errors = [];
for (const level of ["warn", "error"]) {
  console[level] = (...items) => warnings.push(items.map(String).join(" "));
}

const requests = [];
async function recordingFetch(input, init) {
  requests.push({ url: String(input), body: init?.body ? JSON.parse(init.body) : null });
  return fetch(input, init);
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

const chat = new Chat({
  id: args.chatId,
  transport: new DefaultChatTransport({ api: url, fetch: recordingFetch }),
  sendAutomaticallyWhen: lastAssistantMessageIsCompleteWithApprovalResponses,
  onError: (e) => errors.push(String(e)),
});
await chat.sendMessage({ text: args.text });
const asked = [];
for (let i = 0; i < 200 && chat.status !== "ready"; i++) await new Promise((r) => setTimeout(r, 25));
for (const part of chat.messages.at(-1)?.parts ?? []) {
  if (part.state === "approval-requested") {
    asked.push(structuredClone(part));
    await chat.addToolApprovalResponse({ id: part.approval.id, approved: args.approved, reason: args.reason });
  }
}
for (let i = 0; i < 200 && (chat.status !== "ready" || requests.length < 2); i++) {
  await new Promise((r) => setTimeout(r, 25));
}
console.log(JSON.stringify({ asked, messages: chat.messages, requests, status: chat.status, warnings, errors }));
