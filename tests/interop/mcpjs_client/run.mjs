// The MCP TypeScript SDK's client against a uamp MCP endpoint.
// Usage: node run.mjs URL call|cancel|auth [TOKEN]; prints one JSON line.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import {
  discoverOAuthProtectedResourceMetadata,
  extractResourceMetadataUrl,
} from "@modelcontextprotocol/sdk/client/auth.js";

const [url, action, token] = process.argv.slice(2);

async function connect() {
  const headers = token ? { Authorization: `Bearer ${token}` } : {};
  const transport = new StreamableHTTPClientTransport(new URL(url), { requestInit: { headers } });
  const client = new Client({ name: "uamp-interop", version: "1.0.0" });
  await client.connect(transport);
  return { client, transport };
}

async function call() {
  const { client, transport } = await connect();
  const { tools } = await client.listTools();
  const name = tools[0].name;
  const progress = [];
  const result = await client.callTool(
    { name, arguments: { prompt: "what is 2+3?" } },
    undefined,
    { onprogress: (p) => progress.push(p) },
  );
  const plain = await client.callTool({ name, arguments: { prompt: "hello" } });
  const out = {
    protocolVersion: transport.protocolVersion,
    sessionId: transport.sessionId,
    tools: tools.map((t) => ({ name: t.name, required: t.inputSchema.required })),
    text: result.content[0].text,
    isError: result.isError,
    progress,
    plain: plain.content[0].text,
  };
  await transport.terminateSession();
  await client.close();
  return out;
}

async function cancel() {
  const { client } = await connect();
  const { tools } = await client.listTools();
  const controller = new AbortController();
  let error = null;
  try {
    await client.callTool(
      { name: tools[0].name, arguments: { prompt: "go" } },
      undefined,
      // The agent's first words arrive as progress: then the user gives up.
      { signal: controller.signal, onprogress: () => controller.abort("enough") },
    );
  } catch (e) {
    error = String(e);
  }
  // The session goes on after a cancelled call.
  const again = await client.listTools();
  await client.close();
  return { error, toolsAfter: again.tools.length };
}

async function auth() {
  const refused = await fetch(url, {
    method: "POST",
    headers: { "content-type": "application/json", accept: "application/json, text/event-stream" },
    body: JSON.stringify({ jsonrpc: "2.0", id: 1, method: "initialize", params: {} }),
  });
  const metadataUrl = extractResourceMetadataUrl(refused);
  const named = await discoverOAuthProtectedResourceMetadata(url, { resourceMetadataUrl: metadataUrl });
  const found = await discoverOAuthProtectedResourceMetadata(url);
  let connectError = null;
  try {
    await connect();
  } catch (e) {
    connectError = String(e);
  }
  return { status: refused.status, metadataUrl: String(metadataUrl), named, found, connectError };
}

const actions = { call, cancel, auth };
console.log(JSON.stringify(await actions[action]()));
