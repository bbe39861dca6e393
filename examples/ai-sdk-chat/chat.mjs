// A chat with a uamp agent through the Vercel AI SDK, the way `useChat` runs it.
//
//   npm ci && node chat.mjs [URL] [MESSAGE ...]
//
// URL defaults to the demo agent of `uamp serve`; the messages default to a
// question its own `add` tool answers (a server tool) and one that needs the
// page's `get_weather` tool (a client tool: run here, its output sent back).
// In React, `useChat({ transport, onToolCall, sendAutomaticallyWhen })` is the
// same Chat with its state in React.
import {
  AbstractChat,
  DefaultChatTransport,
  lastAssistantMessageIsCompleteWithToolCalls,
} from "ai";

const [url = "http://127.0.0.1:8765/agents/demo/ai-sdk", ...asked] = process.argv.slice(2);
const prompts = asked.length ? asked : ["what is 2+3?", "get weather in Paris"];

// What useChat keeps in React state: the messages and the status.
class ChatState {
  status = "ready";
  error = undefined;
  messages = [];
  pushMessage(message) { this.messages = [...this.messages, message]; }
  popMessage() { this.messages = this.messages.slice(0, -1); }
  replaceMessage(index, message) {
    this.messages = this.messages.map((m, i) => (i === index ? message : m));
  }
  snapshot(value) { return structuredClone(value); }
}

class Chat extends AbstractChat {
  constructor(options) { super({ ...options, state: new ChatState() }); }
}

// The page's own tool, declared to the agent through the request body.
const tools = [{
  type: "function",
  function: {
    name: "get_weather",
    description: "The weather in a city.",
    parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] },
  },
}];

const chat = new Chat({
  transport: new DefaultChatTransport({ api: url, body: { tools } }),
  // Send the conversation again once every client tool call has its output.
  sendAutomaticallyWhen: lastAssistantMessageIsCompleteWithToolCalls,
  onToolCall({ toolCall }) {
    if (toolCall.dynamic) return; // the agent's own tools run on the server
    if (toolCall.toolName === "get_weather") {
      chat.addToolOutput({
        tool: "get_weather",
        toolCallId: toolCall.toolCallId,
        output: `sunny, 21 C in ${toolCall.input.city}`,
      });
    }
  },
  onError(error) { console.error("error:", error.message); },
});

function show(message) {
  const out = [];
  for (const part of message.parts) {
    if (part.type === "text") out.push(part.text);
    else if (part.type === "dynamic-tool" || part.type.startsWith("tool-")) {
      const name = part.toolName ?? part.type.slice(5);
      out.push(`[${name}(${JSON.stringify(part.input)}) -> ${JSON.stringify(part.output)}]`);
    }
  }
  return `${message.role}: ${out.join(" ")}`;
}

const idle = async () => {
  do await new Promise((r) => setTimeout(r, 50));
  while (chat.status === "submitted" || chat.status === "streaming");
};

for (const text of prompts) {
  const before = chat.messages.length;
  await chat.sendMessage({ text });
  await idle();
  for (const message of chat.messages.slice(before)) console.log(show(message));
}
