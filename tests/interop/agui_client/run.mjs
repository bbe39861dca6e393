// One AG-UI run with @ag-ui/client 1.0's HttpAgent (the client CopilotKit-style
// frontends use), as tests/interop/test_agui_ts_client.py drives it.
//
// node run.mjs URL INPUT_JSON: INPUT_JSON is {"messages": [...], "tools": [...]}.
// Prints one JSON line: the events as the client received them, and the
// client's message history after the run (what a chat UI renders).
import { HttpAgent } from "@ag-ui/client";

const [url, inputJson] = process.argv.slice(2);
const input = JSON.parse(inputJson);
const agent = new HttpAgent({ url, threadId: "thread-1", initialMessages: input.messages });
const events = [];
const orders = [];
await agent.runAgent(
  { runId: "run-1", tools: input.tools ?? [] },
  {
    onEvent({ event }) {
      events.push(event);
    },
    onMessagesChanged({ messages }) {
      orders.push(messages.map((m) => m.id));
    },
  },
);
console.log(JSON.stringify({ events, messages: agent.messages, orders }));
