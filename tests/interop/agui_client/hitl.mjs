// A human in the loop with @ag-ui/client 1.0's HttpAgent, as
// tests/interop/test_agui_interrupts.py drives it: run 1 ends with an
// interrupt outcome (agent.pendingInterrupts), run 2 answers it with
// buildResumeArray and streams the rest of the paused run.
//
// node hitl.mjs URL INPUT_JSON: INPUT_JSON is {"threadId", "messages",
// "response": a ResumeResponse ({status: "resolved", payload} or
// {status: "cancelled"}), "only": "resume" to send run 2 alone with
// "resume" entries given as they are (answering a run started elsewhere),
// "only": "first" to stop after run 1}.
// Prints one JSON line: both runs' events and what the client kept.
import { HttpAgent, buildResumeArray } from "@ag-ui/client";

const [url, inputJson] = process.argv.slice(2);
const input = JSON.parse(inputJson);
const agent = new HttpAgent({ url, threadId: input.threadId, initialMessages: input.messages });
const collect = (into) => ({
  onEvent({ event }) {
    into.push(event);
  },
});
const first = [];
let pending = [];
let resume = input.resume ?? [];
if (input.only !== "resume") {
  await agent.runAgent({ runId: "run-1" }, collect(first));
  pending = agent.pendingInterrupts.map((i) => ({ ...i }));
  if (input.only !== "first") {
    const responses = Object.fromEntries(pending.map((i) => [i.id, input.response]));
    resume = buildResumeArray(pending, responses);
  }
}
const second = [];
if (input.only !== "first") {
  await agent.runAgent({ runId: "run-2", resume }, collect(second));
}
console.log(
  JSON.stringify({
    first,
    pending,
    second,
    messages: agent.messages,
    after: agent.pendingInterrupts,
  }),
);
