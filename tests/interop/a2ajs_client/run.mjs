// Drives @a2a-js/sdk against a uamp server: argv[2] = agent base URL (no trailing slash).
// Prints one JSON line: the card names each base form resolves to, and the answer
// text of a blocking and a streaming send (artifact chunks concatenated as a UI would).
import { ClientFactory, DefaultAgentCardResolver } from "@a2a-js/sdk/client";

const base = process.argv[2];
const resolver = new DefaultAgentCardResolver();
const cardName = async (url) => {
  try {
    return (await resolver.resolve(url)).name;
  } catch (e) {
    return `error: ${e.message}`;
  }
};
const textOf = (parts) =>
  (parts ?? []).map((p) => (p.content?.$case === "text" ? p.content.value : "")).join("");
const message = (id) => ({
  message: {
    messageId: id,
    role: 1,
    parts: [{ content: { $case: "text", value: "hello" }, mediaType: "text/plain" }],
  },
});

const out = { noSlash: await cardName(base), slash: await cardName(`${base}/`) };
const client = await new ClientFactory().createFromUrl(`${base}/`);
const sent = await client.sendMessage(message("m-block"));
out.blocking = sent.artifacts
  ? { state: sent.status?.state, text: sent.artifacts.map((a) => textOf(a.parts)).join("") }
  : { text: textOf(sent.parts) };
const artifacts = new Map();
const kinds = [];
for await (const { payload } of client.sendMessageStream(message("m-stream"))) {
  kinds.push(payload.$case);
  const event = payload.value;
  if (payload.$case === "artifactUpdate") {
    const id = event.artifact.artifactId;
    const prior = event.append ? artifacts.get(id) ?? "" : "";
    artifacts.set(id, prior + textOf(event.artifact.parts));
  } else if (payload.$case === "statusUpdate" || payload.$case === "task") {
    out.finalState = event.status?.state;
  }
}
out.streaming = { text: [...artifacts.values()].join(""), kinds };
console.log(JSON.stringify(out));
