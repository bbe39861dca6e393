// The uamp playground: one UAMP WebSocket, one multiplexed session per pane.
//
// Theory of operation: the page opens `/uamp` and proposes its own session id
// in each `session.create`, so every event the server sends is routed to its
// pane by `session_id`. A bearer token goes in `session.create.token` (and
// `session.update` when it changes), never in the URL, where proxies and
// access logs would keep it: the server accepts a UAMP socket without a
// token and authenticates each session instead. When the socket drops, each
// pane resumes its session on the next one (`extensions.resume_from`, the
// last event id it saw; docs/resume.md): the missed events, a reply still
// streaming included, arrive once each. A refused resume opens a new session. A pane
// keeps the response in flight; text deltas are appended to its raw text and
// the markdown is re-rendered at most once per animation frame. The markdown
// renderer escapes every character of the input before it adds any tag, and
// only http(s)/mailto links survive, so nothing an agent says becomes markup.
//
// Chat rooms (docs/chat.md): "Join" opens a pane whose session joins a room
// (`session.create.chat`, the name in `session.extensions.chat.username`).
// There a message is only `input.text`: the room fans it out and its agent
// answers by the room's policy. The pane lists who is in the room
// (`presence.online` / `presence.offline`), says who is typing
// (`presence.typing`), and shows every `message.created` (the user's own
// come back too, in the room's order), the agents' included; their streamed answers (response events with a `chat_id`) are
// not drawn twice. While the user types, `input.typing` goes out at most
// every TYPING_EVERY ms, and a stop once they send or pause.
"use strict";

(() => {
  const config = JSON.parse(document.getElementById("uamp-config").textContent || "{}");
  const agents = Array.isArray(config.agents) ? config.agents : [];
  const $ = (sel, root = document) => root.querySelector(sel);

  // --- markdown (escape first, then a small safe subset) -------------------

  const ESCAPES = { "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" };
  const escapeHtml = (s) => String(s).replace(/[&<>"']/g, (c) => ESCAPES[c]);

  function inline(escaped) {
    const codes = [];
    let s = escaped.replace(/`([^`\n]+)`/g, (_, code) => {
      codes.push(`<code>${code}</code>`);
      return `\u0000${codes.length - 1}\u0000`;
    });
    s = s
      .replace(/\[([^\]\n]+)\]\(((?:https?:\/\/|mailto:)[^\s)]+)\)/g,
        (_, text, url) => `<a href="${url}" target="_blank" rel="noopener noreferrer">${text}</a>`)
      .replace(/\*\*([^*\n]+)\*\*/g, "<strong>$1</strong>")
      .replace(/__([^_\n]+)__/g, "<strong>$1</strong>")
      .replace(/(^|[^*\w])\*([^*\n]+)\*(?!\w)/g, "$1<em>$2</em>")
      .replace(/(^|[^_\w])_([^_\n]+)_(?!\w)/g, "$1<em>$2</em>")
      .replace(/~~([^~\n]+)~~/g, "<del>$1</del>");
    return s.replace(/\u0000(\d+)\u0000/g, (_, i) => codes[Number(i)]);
  }

  function markdown(text) {
    const out = [];
    const lines = escapeHtml(text).split("\n");
    let para = [];
    let list = null; // {tag, items}
    const flushPara = () => {
      if (para.length) out.push(`<p>${para.map(inline).join("<br>")}</p>`);
      para = [];
    };
    const flushList = () => {
      if (list) out.push(`<${list.tag}>${list.items.map((i) => `<li>${inline(i)}</li>`).join("")}</${list.tag}>`);
      list = null;
    };
    for (let i = 0; i < lines.length; i++) {
      const line = lines[i];
      const fence = line.match(/^\s*```\s*([\w+-]*)\s*$/);
      if (fence) {
        flushPara(); flushList();
        const body = [];
        for (i++; i < lines.length && !/^\s*```\s*$/.test(lines[i]); i++) body.push(lines[i]);
        const lang = fence[1] ? ` data-lang="${fence[1]}"` : "";
        out.push(`<pre${lang}><code>${body.join("\n")}</code></pre>`);
        continue;
      }
      const heading = line.match(/^(#{1,6})\s+(.*)$/);
      const bullet = line.match(/^\s*[-*+]\s+(.*)$/);
      const numbered = line.match(/^\s*\d+[.)]\s+(.*)$/);
      const quote = line.match(/^&gt;\s?(.*)$/);
      if (heading) {
        flushPara(); flushList();
        const level = Math.min(heading[1].length + 2, 6);
        out.push(`<h${level}>${inline(heading[2])}</h${level}>`);
      } else if (bullet || numbered) {
        flushPara();
        const tag = bullet ? "ul" : "ol";
        if (!list || list.tag !== tag) { flushList(); list = { tag, items: [] }; }
        list.items.push((bullet || numbered)[1]);
      } else if (quote) {
        flushPara(); flushList();
        out.push(`<blockquote>${inline(quote[1])}</blockquote>`);
      } else if (/^\s*(?:-{3,}|\*{3,})\s*$/.test(line)) {
        flushPara(); flushList();
        out.push("<hr>");
      } else if (!line.trim()) {
        flushPara(); flushList();
      } else {
        flushList();
        para.push(line);
      }
    }
    flushPara(); flushList();
    return out.join("");
  }

  // The renderer, for the tests (and the curious in the console).
  window.uampMarkdown = markdown;

  // --- small DOM helpers --------------------------------------------------

  function el(tag, cls, text) {
    const node = document.createElement(tag);
    if (cls) node.className = cls;
    if (text !== undefined) node.textContent = text;
    return node;
  }

  const randomId = (prefix) => {
    const bytes = new Uint8Array(12);
    crypto.getRandomValues(bytes);
    return prefix + Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
  };

  // An amount as sent (a string such as "0.01") is shown as is; a computed
  // cost (a float) with the decimals it needs, at least two.
  const fmtCost = (amount, currency) => {
    const n = Number(amount);
    let shown = String(amount);
    if (Number.isFinite(n)) {
      shown = String(Number(n.toFixed(6)));
      if (/^-?\d+(\.\d)?$/.test(shown)) shown = n.toFixed(2);
    }
    return currency && currency !== "USD" ? `${shown} ${currency}` : `$${shown}`;
  };

  // --- theme --------------------------------------------------------------

  const root = document.documentElement;
  const prefersDark = window.matchMedia("(prefers-color-scheme: dark)");
  const themeButton = $("#theme-toggle");
  function currentTheme() {
    return root.dataset.theme || (prefersDark.matches ? "dark" : "light");
  }
  function showTheme() {
    const theme = currentTheme();
    themeButton.textContent = theme === "dark" ? "\u2600" : "\u263E";
    themeButton.setAttribute("aria-pressed", String(theme === "dark"));
  }
  try {
    const saved = localStorage.getItem("uamp-theme");
    if (saved === "dark" || saved === "light") root.dataset.theme = saved;
  } catch (_) { /* storage may be off */ }
  themeButton.addEventListener("click", () => {
    root.dataset.theme = currentTheme() === "dark" ? "light" : "dark";
    try { localStorage.setItem("uamp-theme", root.dataset.theme); } catch (_) { /* ignore */ }
    showTheme();
  });
  prefersDark.addEventListener("change", showTheme);
  showTheme();

  // --- the connection -----------------------------------------------------

  const statusPill = $("#status");
  const tokenInput = $("#token");
  const panes = new Map(); // session_id -> Pane, for routing events
  const allPanes = new Set(); // every open pane, connected or not
  let activePane = null;
  let socket = null;
  let retry = 0;
  let retryTimer = null;

  function setStatus(state, text) {
    statusPill.dataset.state = state;
    statusPill.textContent = text;
  }

  function wsUrl() {
    const scheme = location.protocol === "https:" ? "wss:" : "ws:";
    return `${scheme}//${location.host}${config.socket}`;
  }

  function send(event) {
    if (socket && socket.readyState === WebSocket.OPEN) {
      socket.send(JSON.stringify(event));
      return true;
    }
    return false;
  }

  function connect() {
    clearTimeout(retryTimer);
    if (socket) { socket.onclose = null; socket.close(); }
    setStatus("connecting", "connecting");
    const ws = new WebSocket(wsUrl());
    socket = ws;
    ws.onopen = () => {
      retry = 0;
      setStatus("open", "connected");
      for (const pane of allPanes) {
        const state = pane.node.dataset.state;
        if (state === "offline" && pane.lastEventId) {
          pane.resume();
        } else if (state !== "ready") {
          if (state === "ended") pane.notice("reconnected: a new session", "info");
          pane.open();
        }
      }
    };
    ws.onmessage = (msg) => {
      let event;
      try { event = JSON.parse(msg.data); } catch (_) { return; }
      route(event);
    };
    ws.onclose = () => {
      if (socket !== ws) return;
      for (const pane of panes.values()) pane.disconnected();
      setStatus("closed", "offline, retrying");
      retry = Math.min(retry + 1, 5);
      retryTimer = setTimeout(connect, 500 * 2 ** retry);
    };
  }

  function route(event) {
    const pane = panes.get(event.session_id);
    if (pane) {
      if (event.event_id) pane.lastEventId = event.event_id;
      pane.handle(event);
    } else if (event.type === "session.error" && panes.size === 1) {
      panes.values().next().value.handle(event);
    }
  }

  // --- one session pane ---------------------------------------------------

  const TYPING_EVERY = 1500; // ms between two input.typing starts
  const TYPING_PAUSE = 3000; // ms without a key before input.typing stops

  class Pane {
    constructor(agent, room = null, username = null) {
      this.agent = agent;
      this.room = room;
      this.username = username;
      this.people = new Map(); // user id -> name, in the room
      this.typists = new Map(); // user id -> name, typing now
      this.typingSent = 0; // when this pane last said it is typing
      this.typingTimer = null;
      this.node = $("#session-template").content.firstElementChild.cloneNode(true);
      this.log = $(".log", this.node);
      this.input = $("textarea", this.node);
      this.sendButton = $(".send", this.node);
      this.stopButton = $(".stop", this.node);
      this.totals = { input: 0, output: 0, cost: 0, currency: "", paid: 0 };
      this.response = null; // the turn in flight
      $(".agent-name", this.node).textContent = agent;
      this.input.placeholder = `Message ${agent}\u2026`;
      this.log.dataset.hint = `Say something to ${agent}. Enter sends, Shift+Enter adds a line, Esc stops a reply.`;
      $(".close", this.node).addEventListener("click", () => this.close());
      $(".composer", this.node).addEventListener("submit", (e) => { e.preventDefault(); this.submit(); });
      this.stopButton.addEventListener("click", () => this.cancel());
      this.input.addEventListener("keydown", (e) => {
        if (e.key === "Enter" && !e.shiftKey && !e.isComposing) { e.preventDefault(); this.submit(); }
      });
      this.input.addEventListener("input", () => { this.autosize(); this.typed(); });
      if (room) {
        this.node.dataset.room = room;
        const label = $(".room-name", this.node);
        label.textContent = `#${room}`;
        label.hidden = false;
        $(".roster", this.node).hidden = false;
        $(".typing", this.node).hidden = false;
        this.input.placeholder = `Message #${room}\u2026`;
        this.log.dataset.hint = `You are in #${room} with ${agent}. Everyone here sees what you send.`;
        this.showRoster();
      }
      this.node.addEventListener("focusin", () => { activePane = this; });
      $("#sessions").append(this.node);
      allPanes.add(this);
      this.open();
    }

    open() {
      if (this.id) panes.delete(this.id);
      this.lastEventId = null;
      this.id = randomId("sess_");
      this.node.dataset.sessionId = this.id;
      $(".session-id", this.node).textContent = this.id.slice(0, 13);
      panes.set(this.id, this);
      const token = tokenInput.value.trim();
      const create = this.createEvent();
      if (token) create.token = token;
      this.setState("opening");
      send(create);
    }

    createEvent() {
      const create = {
        type: "session.create", uamp_version: "1.0", session_id: this.id, agent: this.agent,
        session: { modalities: ["text"] },
        // This page answers interrupts (docs/human-in-the-loop.md): an approval card.
        client_capabilities: {
          id: "uamp-playground", provider: "uamp", modalities: ["text"], extensions: { interrupts: true },
        },
      };
      if (this.room) {
        create.chat = this.room;
        if (this.username) create.session.extensions = { chat: { username: this.username } };
      }
      return create;
    }

    // The socket dropped: the session (and a reply in flight) waits for a resume.
    disconnected() {
      if (this.node.dataset.state === "ready" || this.node.dataset.state === "resuming") {
        this.setState("offline");
      }
    }

    resume() {
      const create = { ...this.createEvent(), extensions: { resume_from: this.lastEventId } };
      const token = tokenInput.value.trim();
      if (token) create.token = token;
      this.setState("resuming");
      send(create);
    }

    close() {
      if (this.response) this.cancel();
      send({ type: "session.end", session_id: this.id });
      panes.delete(this.id);
      allPanes.delete(this);
      this.node.remove();
      if (activePane === this) activePane = null;
      showEmpty();
    }

    setState(state) {
      this.node.dataset.state = state;
      const busy = Boolean(this.response);
      this.sendButton.hidden = busy;
      this.stopButton.hidden = !busy;
    }

    autosize() {
      this.input.style.height = "auto";
      this.input.style.height = `${Math.min(this.input.scrollHeight + 2, 200)}px`;
    }

    scroll() {
      const log = this.log;
      if (log.scrollHeight - log.scrollTop - log.clientHeight < 120) log.scrollTop = log.scrollHeight;
    }

    submit() {
      const text = this.input.value.trim();
      if (!text || this.response || this.node.dataset.state !== "ready") return;
      this.input.value = "";
      this.autosize();
      if (this.room) {
        // The room stores it and sends it back to everyone, this pane included,
        // as message.created (in the room's order); answers come the same way.
        this.stopTyping();
        send({ type: "input.text", session_id: this.id, text, context: { chat_id: this.room } });
        return;
      }
      const bubble = el("div", "msg user");
      bubble.append(el("div", "body", text));
      this.log.append(bubble);
      this.startResponse();
      send({ type: "input.text", session_id: this.id, text });
      send({ type: "response.create", session_id: this.id });
      this.log.scrollTop = this.log.scrollHeight;
    }

    // --- rooms ---

    typed() {
      if (!this.room || this.node.dataset.state !== "ready") return;
      const now = Date.now();
      if (now - this.typingSent >= TYPING_EVERY) {
        this.typingSent = now;
        send({ type: "input.typing", session_id: this.id, chat_id: this.room, is_typing: true });
      }
      clearTimeout(this.typingTimer);
      this.typingTimer = setTimeout(() => this.stopTyping(), TYPING_PAUSE);
    }

    stopTyping() {
      clearTimeout(this.typingTimer);
      if (!this.typingSent) return;
      this.typingSent = 0;
      send({ type: "input.typing", session_id: this.id, chat_id: this.room, is_typing: false });
    }

    showRoster() {
      const names = [...this.people.values()];
      $(".roster", this.node).textContent = names.length
        ? `In #${this.room}: ${names.join(", ")}` : `In #${this.room}: nobody else yet`;
    }

    showTypists() {
      const names = [...this.typists.values()];
      $(".typing", this.node).textContent = !names.length ? ""
        : `${names.join(", ")} ${names.length === 1 ? "is" : "are"} typing\u2026`;
    }

    roomEvent(event) {
      const who = event.user_id || (event.sender && event.sender.id) || "?";
      const name = event.username || (event.sender && event.sender.name) || who;
      switch (event.type) {
        case "presence.online":
          if (!this.people.has(who)) this.notice(`${name} joined`, "info");
          this.people.set(who, name);
          this.showRoster();
          break;
        case "presence.offline":
          if (this.people.delete(who)) this.notice(`${name} left`, "info");
          this.typists.delete(who);
          this.showRoster();
          this.showTypists();
          break;
        case "presence.typing":
          if (event.is_typing) this.typists.set(who, name); else this.typists.delete(who);
          this.showTypists();
          break;
        case "message.created": {
          const message = event.message || {};
          const content = typeof message.content === "string" ? message.content
            : (message.content_items || message.content || [])
              .filter((i) => i && i.type === "text").map((i) => i.text).join("");
          const node = el("div", "msg room");
          node.dataset.kind = (event.sender && event.sender.kind) || "user";
          node.dataset.seq = String(event.seq ?? "");
          node.append(el("div", "sender", name), el("div", "body", content));
          this.log.append(node);
          this.typists.delete(who);
          this.showTypists();
          this.scroll();
          break;
        }
        default:
          break; // an agent's streamed answer: its message.created follows
      }
    }

    cancel() {
      if (!this.response) return;
      const event = { type: "response.cancel", session_id: this.id };
      if (this.response.id) event.response_id = this.response.id;
      send(event);
    }

    startResponse() {
      const node = el("div", "msg assistant");
      node.dataset.status = "pending";
      const parts = el("div", "parts");
      const meta = el("div", "meta");
      node.append(parts, meta);
      this.log.append(node);
      this.response = {
        id: null, node, parts, meta, textNode: null, text: "", thinkingNode: null, thinking: "",
        tools: new Map(), usage: { input: 0, output: 0 }, cost: null, frame: 0,
      };
      this.setState("ready");
    }

    textPart() {
      const r = this.response;
      if (!r.textNode) {
        r.textNode = el("div", "body md");
        r.text = "";
        r.parts.append(r.textNode);
      }
      return r.textNode;
    }

    renderSoon() {
      const r = this.response;
      if (r.frame) return;
      r.frame = requestAnimationFrame(() => {
        r.frame = 0;
        if (r.textNode) r.textNode.innerHTML = markdown(r.text);
        if (r.thinkingNode) $(".thinking-text", r.thinkingNode).textContent = r.thinking;
        this.scroll();
      });
    }

    toolCard(id) {
      const r = this.response;
      let card = r.tools.get(id);
      if (!card) {
        card = { node: el("details", "tool"), name: "", args: "" };
        card.node.dataset.callId = id;
        card.node.dataset.status = "running";
        const summary = el("summary");
        summary.append(el("span", "tool-icon", "\u2692"), el("span", "tool-name"), el("span", "tool-state muted", "running\u2026"));
        card.node.append(summary, el("div", "tool-label muted", "arguments"), el("pre", "tool-args"),
          el("div", "tool-label muted", "result"), el("pre", "tool-result"));
        r.parts.append(card.node);
        r.tools.set(id, card);
        r.textNode = null; // text after a tool call starts a new block
      }
      return card;
    }

    showToolCall(id, name, args) {
      const card = this.toolCard(id);
      if (name) card.name = name;
      if (args) card.args += args;
      $(".tool-name", card.node).textContent = card.name || "tool";
      let shown = card.args;
      try { shown = JSON.stringify(JSON.parse(card.args), null, 2); } catch (_) { /* partial */ }
      $(".tool-args", card.node).textContent = shown;
    }

    showToolResult(id, result, status) {
      const card = this.toolCard(id);
      card.node.dataset.status = status === "failed" || status === "error" ? "failed" : "done";
      $(".tool-result", card.node).textContent = result ?? "";
      $(".tool-state", card.node).textContent = `\u2192 ${result ?? status ?? "done"}`.slice(0, 80);
    }

    showPayment(event) {
      const r = this.response;
      const req = event.requirements || {};
      const card = el("form", "payment");
      card.dataset.state = "required";
      const title = el("div", "payment-title");
      title.append(el("strong", "", "Payment required"), el("span", "muted",
        ` ${fmtCost(req.amount ?? "?", req.currency)}${req.reason ? ` \u2014 ${req.reason}` : ""}`));
      const input = el("input");
      Object.assign(input, { type: "password", placeholder: "paste a payment token", spellcheck: false });
      input.setAttribute("aria-label", "Payment token");
      const pay = el("button", "btn primary", "Pay");
      pay.type = "submit";
      const note = el("div", "payment-note muted");
      card.append(title, input, pay, note);
      card.addEventListener("submit", (e) => {
        e.preventDefault();
        const token = input.value.trim();
        if (!token) { input.focus(); return; }
        note.textContent = "submitting\u2026";
        send({ type: "payment.submit", session_id: this.id, payment: { scheme: "token", token } });
      });
      (r ? r.parts : this.log).append(card);
      this.payment = card;
      input.focus();
      this.scroll();
    }

    // The run waits for a person: a card with Approve / Deny (a question: a field and Answer).
    showInterrupt(event) {
      const r = this.response;
      const card = el("form", "interrupt");
      card.dataset.interruptId = event.interrupt_id;
      card.dataset.state = "pending";
      const approval = event.kind === "approval";
      const title = el("div", "interrupt-title");
      title.append(el("strong", "", approval ? "Approval needed" : "Question"),
        el("span", "muted", ` ${event.prompt || ""}`));
      card.append(title);
      if (approval && event.tool_name) {
        card.append(el("pre", "interrupt-args", `${event.tool_name}(${JSON.stringify(event.arguments || {}, null, 2)})`));
      }
      const note = el("div", "interrupt-note muted");
      const answer = (fields) => {
        note.textContent = "sending\u2026";
        send({ type: "interrupt.answer", session_id: this.id, interrupt_id: event.interrupt_id, ...fields });
      };
      if (approval) {
        const approve = el("button", "btn primary", "Approve");
        const deny = el("button", "btn", "Deny");
        approve.type = "submit";
        deny.type = "button";
        deny.addEventListener("click", () => answer({ approved: false }));
        card.addEventListener("submit", (e) => { e.preventDefault(); answer({ approved: true }); });
        card.append(approve, deny);
      } else {
        const input = el("input");
        Object.assign(input, { type: "text", placeholder: "your answer", spellcheck: true });
        input.setAttribute("aria-label", "Answer");
        const ok = el("button", "btn primary", "Answer");
        ok.type = "submit";
        card.addEventListener("submit", (e) => {
          e.preventDefault();
          const text = input.value.trim();
          if (!text) { input.focus(); return; }
          let value = text;
          try { value = JSON.parse(text); } catch (_) { /* plain text */ }
          answer({ value });
        });
        card.append(input, ok);
      }
      card.append(note);
      (r ? r.parts : this.log).append(card);
      this.scroll();
    }

    interruptOutcome(event) {
      const card = this.node.querySelector(`form.interrupt[data-interrupt-id="${CSS.escape(event.interrupt_id)}"]`);
      if (!card) return;
      card.dataset.state = event.outcome || "resolved";
      $(".interrupt-note", card).textContent = event.outcome || "resolved";
      card.querySelectorAll("input, button").forEach((n) => { n.disabled = true; });
    }

    paymentOutcome(event) {
      const card = this.payment;
      if (event.type === "payment.accepted") {
        const amount = Number(event.amount);
        if (Number.isFinite(amount)) this.totals.paid += amount;
        if (event.currency) this.totals.currency = event.currency;
        this.showTotals();
        if (!card) return;
        card.dataset.state = "accepted";
        $(".payment-note", card).textContent = `paid${event.amount ? ` ${fmtCost(event.amount, event.currency)}` : ""}`;
        card.querySelectorAll("input, button").forEach((n) => { n.disabled = true; });
        this.payment = null;
      } else if (card) {
        card.dataset.state = "refused";
        $(".payment-note", card).textContent = `${event.code || "refused"}: ${event.message || ""}`;
      }
    }

    addUsage(u, replace) {
      const r = this.response;
      if (!r || !u) return;
      const input = u.input_tokens || 0;
      const output = u.output_tokens || 0;
      if (replace) { r.usage = { input, output }; } else { r.usage.input += input; r.usage.output += output; }
      if (u.cost && u.cost.total_cost != null) r.cost = { amount: u.cost.total_cost, currency: u.cost.currency };
      this.showMeta();
    }

    showMeta(extra) {
      const r = this.response;
      const bits = [`${r.usage.input} in \u00b7 ${r.usage.output} out`];
      if (r.cost) bits.push(fmtCost(r.cost.amount, r.cost.currency));
      if (extra) bits.push(extra);
      r.meta.textContent = bits.join(" \u00b7 ");
    }

    showTotals() {
      const t = this.totals;
      const bits = [`${t.input}/${t.output} tok`];
      const spent = t.cost || t.paid;
      if (spent) bits.push(fmtCost(spent, t.currency));
      $(".totals", this.node).textContent = bits.join(" \u00b7 ");
    }

    finish(status, note) {
      const r = this.response;
      if (!r) return;
      if (r.frame) cancelAnimationFrame(r.frame);
      r.frame = 0;
      if (r.textNode) r.textNode.innerHTML = markdown(r.text);
      if (r.thinkingNode) {
        $(".thinking-text", r.thinkingNode).textContent = r.thinking;
        $("summary", r.thinkingNode).textContent = "Thought";
      }
      r.node.dataset.status = status;
      this.totals.input += r.usage.input;
      this.totals.output += r.usage.output;
      if (r.cost) {
        this.totals.cost += Number(r.cost.amount) || 0;
        this.totals.currency = r.cost.currency || this.totals.currency;
      }
      this.showMeta(status === "completed" ? null : note || status);
      if (!r.text && !r.tools.size && status === "completed") r.parts.append(el("div", "body muted", "(no text)"));
      this.response = null;
      this.showTotals();
      this.setState(this.node.dataset.state === "offline" ? "offline" : "ready");
      this.scroll();
    }

    notice(text, kind = "error") {
      this.log.append(el("div", `notice ${kind}`, text));
      this.scroll();
    }

    handle(event) {
      const r = this.response;
      if (this.room && (event.chat_id || event.type.startsWith("presence.") || event.type.startsWith("message."))) {
        this.roomEvent(event);
        return;
      }
      switch (event.type) {
        case "session.created":
          if (this.node.dataset.state === "resuming") this.notice("reconnected: session resumed", "info");
          this.setState("ready");
          break;
        case "session.error": {
          const err = event.error || {};
          if (this.node.dataset.state === "resuming") {
            if (r) this.finish("error", "connection lost");
            this.notice(`reconnected: a new session (${err.code || "resume refused"}; earlier turns are not remembered)`, "info");
            this.open();
            break;
          }
          if (this.node.dataset.state === "opening") {
            panes.delete(this.id);
            this.setState("failed");
            if (err.code === "unauthorized" || err.code === "invalid_token") tokenInput.focus();
          }
          if (r) this.finish("error", err.code);
          this.notice(`${err.code || "error"}: ${err.message || ""}`);
          break;
        }
        case "session.end":
          panes.delete(this.id);
          this.setState("ended");
          this.notice(`session ended${event.reason ? ` (${event.reason})` : ""}`, "info");
          break;
        case "response.created":
          if (!r) this.startResponse();
          this.response.id = event.response_id;
          this.response.node.dataset.status = "streaming";
          this.response.node.dataset.responseId = event.response_id || "";
          break;
        case "response.delta": {
          if (!r) break;
          const d = event.delta || {};
          if (d.type === "text") {
            this.textPart();
            r.text += d.text || "";
            this.renderSoon();
          } else if (d.type === "tool_call" && d.tool_call) {
            this.showToolCall(d.tool_call.id, d.tool_call.name, d.tool_call.arguments);
          } else if (d.type === "tool_result" && d.tool_result) {
            this.showToolResult(d.tool_result.call_id, d.tool_result.result, d.tool_result.status);
          }
          break;
        }
        case "tool.call":
          if (r) this.showToolCall(event.call_id, event.name, event.arguments);
          break;
        case "tool.call_done":
          if (r && r.tools.has(event.call_id) && r.tools.get(event.call_id).node.dataset.status === "running") {
            this.showToolResult(event.call_id, undefined, "done");
          }
          break;
        case "thinking":
          if (!r) break;
          if (!r.thinkingNode) {
            r.thinkingNode = el("details", "thinking");
            r.thinkingNode.append(el("summary", "", "Thinking\u2026"), el("div", "thinking-text"));
            r.parts.insertBefore(r.thinkingNode, r.parts.firstChild);
          }
          r.thinking = event.is_delta === false ? event.content || "" : r.thinking + (event.content || "");
          this.renderSoon();
          break;
        case "usage.delta":
          this.addUsage(event.delta, false);
          break;
        case "payment.required":
          this.showPayment(event);
          break;
        case "interrupt.request":
          this.showInterrupt(event);
          break;
        case "interrupt.resolved":
          this.interruptOutcome(event);
          break;
        case "payment.accepted":
        case "payment.error":
          this.paymentOutcome(event);
          break;
        case "payment.balance":
          if (event.balance != null) this.notice(`balance ${fmtCost(event.balance, event.currency)}`, "info");
          break;
        case "response.done": {
          const resp = event.response || {};
          if (resp.usage) this.addUsage(resp.usage, true);
          this.finish(resp.status === "failed" ? "error" : "completed");
          break;
        }
        case "response.cancelled":
          this.finish("cancelled", "stopped");
          break;
        case "response.error": {
          const err = event.error || {};
          this.finish("error", err.code || "error");
          this.notice(`${err.code || "error"}: ${err.message || ""}`);
          break;
        }
        default:
          break;
      }
    }
  }

  // --- page wiring --------------------------------------------------------

  const picker = $("#agent-picker");
  for (const name of agents) picker.append(new Option(name, name));
  if (config.agent) picker.value = config.agent;
  picker.disabled = agents.length < 2;

  function showEmpty() {
    $("#empty").hidden = allPanes.size > 0;
  }

  function newSession(room = null, username = null) {
    if (!picker.value) return;
    const pane = new Pane(picker.value, room, username);
    activePane = pane;
    pane.input.focus();
    showEmpty();
  }

  $("#new-session").addEventListener("click", () => newSession());
  $("#room-form").addEventListener("submit", (e) => {
    e.preventDefault();
    const room = $("#room").value.trim();
    if (!room) { $("#room").focus(); return; }
    newSession(room, $("#username").value.trim() || null);
  });
  // A new token: open sessions take it with session.update, the others open again with it.
  $("#token-form").addEventListener("submit", (e) => {
    e.preventDefault();
    if (!socket || socket.readyState !== WebSocket.OPEN) {
      retry = 0;
      connect();
      return;
    }
    const token = tokenInput.value.trim();
    for (const pane of allPanes) {
      if (pane.node.dataset.state !== "ready") pane.open();
      else if (token) send({ type: "session.update", session_id: pane.id, token });
    }
  });
  document.addEventListener("keydown", (e) => {
    if (e.key === "Escape") {
      const pane = activePane && activePane.response ? activePane
        : [...panes.values()].find((p) => p.response);
      if (pane) { e.preventDefault(); pane.cancel(); }
    } else if (e.altKey && (e.key === "n" || e.key === "N")) {
      e.preventDefault();
      newSession();
    }
  });

  if (!agents.length || !config.socket) {
    setStatus("closed", agents.length ? "this server has no UAMP WebSocket" : "no agent hosted");
    $("#new-session").disabled = true;
    showEmpty();
    return;
  }
  connect();
  newSession();
})();
