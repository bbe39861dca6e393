// The AI Gateway's Vercel OIDC helper is CommonJS for Node; the page never
// calls it (it talks to uamp, not to the gateway), so it gets these stubs.
export function getContext() { return {}; }
export async function getVercelOidcToken() { throw new Error("no Vercel OIDC in this page"); }
