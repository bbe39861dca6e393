// The Vercel AI SDK (npm "ai" 7.x) posting one message to a chat, as
// tests/interop/test_busy_ai_sdk.py drives it to double-text a busy chat.
//
// node busy.mjs URL ARGS_JSON   (ARGS_JSON: {chatId, text, body})
// DefaultChatTransport.sendMessages + readUIMessageStream; prints the chunks
// as the SDK validated them and the final message, or the error the SDK
// raised for a refused request (its status and body are in the message).
import { DefaultChatTransport, readUIMessageStream } from "ai";

const [url, argsJson] = process.argv.slice(2);
const args = JSON.parse(argsJson ?? "{}");
const warnings = [];
const errors = [];
for (const level of ["warn", "error"]) {
  console[level] = (...items) => warnings.push(items.map(String).join(" "));
}
globalThis.AI_SDK_LOG_WARNINGS = (w) => warnings.push(JSON.stringify(w));

const chunks = [];
const transport = new DefaultChatTransport({ api: url, body: args.body ?? {} });
const user = { id: "u1", role: "user", parts: [{ type: "text", text: args.text }] };
let message = null;
let refused = null;
try {
  const stream = await transport.sendMessages({
    chatId: args.chatId, messages: [user], trigger: "submit-message", messageId: undefined, abortSignal: undefined,
  });
  const tapped = stream.pipeThrough(new TransformStream({
    transform(chunk, controller) { chunks.push(chunk); controller.enqueue(chunk); },
  }));
  for await (const m of readUIMessageStream({ stream: tapped, onError: (e) => errors.push(String(e)) })) {
    message = m;
  }
} catch (e) {
  refused = String(e?.message ?? e);
}
console.log(JSON.stringify({ chunks, message, refused, warnings, errors }));
