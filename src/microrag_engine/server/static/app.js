// microRAG web UI: ask and follow up, watch the answer stream in, see why each chunk came
// back and which sentence each chunk supports; contributors drop files, admins review.
// Plain browser JavaScript, no build step. Answers are Markdown rendered by markdown-it
// (raw HTML off) and sanitised by DOMPurify into a DOM fragment; everything else from the
// server (chunks, names, flags) is inserted with textContent only. The page's CSP allows no
// inline script and nothing remote, so even a sanitiser bypass could not run or fetch.
"use strict";

const $ = (sel, root = document) => root.querySelector(sel);
let key = sessionStorage.getItem("microrag-key") || "";
let me = null; // /whoami of the current key
const conversation = []; // the conversation so far: {role, content}, sent with each follow-up
const MAX_HISTORY = 40; // the server's bound on earlier turns
const turns = []; // what each turn showed, so an older citation can bring its sources back
let shownTurn = -1; // the turn whose sources the Sources panel shows

function headers(json = true) {
  const h = json ? { "Content-Type": "application/json" } : {};
  if (key) h["Authorization"] = "Bearer " + key;
  return h;
}

async function api(method, path, body) {
  const r = await fetch(path, { method, headers: headers(body !== undefined), body: body === undefined ? undefined : JSON.stringify(body) });
  const data = await r.json().catch(() => ({ error: "unreadable response" }));
  if (!r.ok) throw new Error(data.error || ("HTTP " + r.status));
  return data;
}

function el(tag, attrs = {}, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === "text") e.textContent = v; else if (k === "class") e.className = v; else e.setAttribute(k, v);
  }
  for (const c of children) if (c !== null && c !== undefined && c !== false) e.append(c);
  return e;
}

// ------------------------------------------------------------ Markdown, sanitised

const md = window.markdownit({ html: false, linkify: false, typographer: false });
// No image is ever loaded from an answer (a classic exfiltration channel): it shows as its alt text.
md.renderer.rules.image = (tokens, i) => md.utils.escapeHtml(`[image: ${tokens[i].content || "no description"}]`);
// Table alignment is the only style attribute markdown-it writes; the CSP forbids inline
// styles, and merely parsing one (inside the sanitiser) is reported as a violation.
md.core.ruler.push("no_style_attributes", (state) => {
  for (const tok of state.tokens) {
    if (tok.attrs) tok.attrs = tok.attrs.filter(([name]) => name !== "style");
    for (const child of tok.children || []) if (child.attrs) child.attrs = child.attrs.filter(([name]) => name !== "style");
  }
});
const PURIFY = {
  ALLOWED_TAGS: ["p", "br", "strong", "em", "b", "i", "s", "del", "code", "pre", "ul", "ol", "li", "a", "blockquote",
    "h1", "h2", "h3", "h4", "h5", "h6", "hr", "table", "thead", "tbody", "tr", "th", "td"],
  ALLOWED_ATTR: ["href", "start"],
  ALLOWED_URI_REGEXP: /^(?:https?:|mailto:)/i, // no javascript:, data:, relative paths to this server
  RETURN_DOM_FRAGMENT: true,
};
const CITE = /\[source: (.+?) · chunk (\d+)\]/g;
const MARK = /\uE000(\d+)\uE001/g; // a citation's place, private-use characters no answer keeps

function markdown(text, { inline = false, cite = null } = {}) {
  // Citations are swapped for marks before parsing (a document name is not Markdown) and
  // become links after sanitising, built here with the DOM, never from markup.
  const cites = [];
  const src = text.replace(/[\uE000\uE001]/g, "").replace(CITE, (_, doc, k) => `\uE000${cites.push([doc, k]) - 1}\uE001`);
  const frag = DOMPurify.sanitize(inline ? md.renderInline(src) : md.render(src), PURIFY);
  for (const a of frag.querySelectorAll("a[href]")) {
    // A link leaves the page in a new tab and says where it goes: a planted document can
    // word a link any way it likes, but not hide its destination.
    a.target = "_blank"; a.rel = "noopener noreferrer nofollow"; a.title = a.href;
    const host = a.protocol === "mailto:" ? "email" : a.host;
    if (!a.textContent.includes(host)) a.after(el("span", { class: "host", text: ` (${host})` }));
  }
  for (const h of frag.querySelectorAll("h1, h2, h3, h4, h5, h6")) { // below the page's own headings
    const n = document.createElement("h" + Math.min(6, Number(h.tagName[1]) + 2));
    n.append(...h.childNodes); h.replaceWith(n);
  }
  // a box that scrolls on its own is a tab stop, so a keyboard can scroll it
  for (const pre of frag.querySelectorAll("pre")) pre.setAttribute("tabindex", "0");
  for (const t of frag.querySelectorAll("table")) { const w = el("div", { class: "tablewrap", tabindex: "0" }); t.replaceWith(w); w.append(t); }
  const walker = document.createTreeWalker(frag, NodeFilter.SHOW_TEXT);
  const hits = [];
  for (let n = walker.nextNode(); n; n = walker.nextNode()) if (n.nodeValue.includes("\uE000")) hits.push(n);
  for (const node of hits) {
    const parts = []; let last = 0;
    for (const m of node.nodeValue.matchAll(MARK)) {
      parts.push(node.nodeValue.slice(last, m.index));
      const [doc, k] = cites[Number(m[1])] || ["?", "?"];
      parts.push(cite ? cite(`${doc}#${k}`, `[${doc} · chunk ${k}]`) : `[${doc} · chunk ${k}]`);
      last = m.index + m[0].length;
    }
    parts.push(node.nodeValue.slice(last));
    node.replaceWith(...parts);
  }
  return frag;
}

// ------------------------------------------------------------ identity

async function whoami() {
  try {
    me = await api("GET", "/whoami");
    $("#whoami").textContent = `${me.name} (${me.role}; may read ${me.clearance.join(", ")})`;
    $("#contribute").hidden = !(me.role === "contributor" || me.role === "admin");
    $("#admin").hidden = me.role !== "admin";
    if (!$("#contribute").hidden) refreshMine();
    if (me.role === "admin") refreshAdmin();
  } catch (err) {
    me = null;
    $("#whoami").textContent = err.message;
    $("#contribute").hidden = true; $("#admin").hidden = true;
  }
  loadSamples();
}

$("#apikey").value = key;
$("#keyform").addEventListener("submit", (ev) => {
  ev.preventDefault();
  key = $("#apikey").value.trim();
  sessionStorage.setItem("microrag-key", key);
  whoami();
});

// ------------------------------------------------------------ suggestions

async function loadSamples() {
  const box = $("#samples");
  let found = [];
  try { found = (await api("GET", "/samples?n=4")).questions; } catch (err) { found = []; }
  const ul = $("ul", box);
  ul.replaceChildren(...found.map((s) => {
    const b = el("button", { type: "button", text: s.question, title: "From " + s.doc });
    b.addEventListener("click", () => { $("#question").value = s.question; $("#askform").requestSubmit(); });
    return el("li", {}, b);
  }));
  $("#question").placeholder = found.length ? "e.g. " + found[0].question : "Ask about your documents";
  box.hidden = !found.length || conversation.length > 0;
}

// ------------------------------------------------------------ asking

function bar(kind, label, value, raw) {
  const fill = el("span");
  fill.style.width = `${Math.max(0, Math.min(1, value)) * 100}%`; // CSSOM, allowed by the page's CSP
  return [el("span", { text: label }),
          el("div", { class: "bar " + kind, role: "meter", "aria-label": label, "aria-valuemin": "0",
                      "aria-valuemax": "1", "aria-valuenow": value.toFixed(3) }, fill),
          el("span", { text: `${value.toFixed(2)}` + (raw === null ? "" : ` (raw ${raw.toFixed(3)})`) })];
}

function gateLine(info) {
  const gate = info.refused ? `Grounding gate refused: ${info.reason}` :
    `Grounding gate passed (best raw cosine ${info.best_raw_em.toFixed(3)}, best raw keyword ${info.best_raw_kw.toFixed(3)}).`;
  const parts = [el("span", { class: info.refused ? "refused" : "", text: gate })];
  if (info.capped && info.capped.length) parts.push(el("div", { class: "meta", text: `Diversity cap held back: ${info.capped.join(", ")}` }));
  return parts;
}

function renderSources(t) {
  shownTurn = t;
  const info = turns[t].info;
  const list = $("#sources");
  list.replaceChildren();
  for (const s of info.sources) {
    const bars = el("div", { class: "bars" }, ...bar("hy", "hybrid", s.hybrid, null), ...bar("kw", "keyword", s.kw, s.raw_kw),
                    ...bar("em", "embedding", s.em, s.raw_em));
    const meta = el("div", { class: "meta" }, el("span", { class: "tag " + s.label, text: s.label }),
                    `${s.principal || "operator"} · ${s.ingested_at || ""}`);
    list.append(el("li", { id: "src-" + s.id, tabindex: "-1" },
      el("strong", { text: `${s.doc} · chunk ${s.chunk}` }), meta, bars, el("div", { class: "chunktext", text: s.text, tabindex: "0",
                                                                     "aria-label": `Text of ${s.doc} chunk ${s.chunk}` })));
  }
}

function citeLink(t) {
  // A link to a chunk of turn t's sources (an older turn's sources come back first).
  return (id, label) => {
    const a = el("a", { href: "#src-" + id, class: "cite", text: label });
    a.addEventListener("click", (ev) => { ev.preventDefault(); if (shownTurn !== t) renderSources(t); highlight(id); });
    return a;
  };
}

function highlight(id) {
  document.querySelectorAll("#sources li").forEach((li) => li.classList.remove("highlight"));
  const li = document.getElementById("src-" + id);
  if (li) { li.classList.add("highlight"); li.focus(); li.scrollIntoView({ block: "nearest" }); }
}

const VERDICT = { entailed: ["ok", "✓ supported"], neutral: ["unsup", "? unsupported"], contradicted: ["bad", "✗ contradicted"] };

function renderVerification(box, v, t) {
  // One row per answer sentence as the verifier split it (a code block is one row): the NLI
  // verdict, its probability, the sentence rendered, and a link to the chunk that decided it.
  box.replaceChildren();
  if (!v) return;
  box.append(el("li", { class: "sum", text: "Verification: " + v.summary }));
  for (const s of v.sentences) {
    const [cls, label] = VERDICT[s.verdict] || ["unsup", s.verdict];
    const said = s.sentence.replace(/\s*\[source: [^\]]*\]/g, ""); // the link below says where
    const code = /^\s*(```|~~~)/.test(said);
    const row = el("li", { class: "verdict " + cls }, el("span", { class: "badge", text: `${label} ${s.probability.toFixed(2)}` }),
                   el("span", { class: "said" }, markdown(said, { inline: !code })));
    if (s.chunk) row.append(" ", citeLink(t)(s.chunk, `[${s.chunk}]`));
    box.append(row);
  }
}

function newTurn(question) {
  const t = turns.length;
  const answer = el("div", { class: "answer", "aria-label": "Answer" });
  const li = el("li", { class: "turn" }, el("p", { class: "q", text: question }), answer,
                el("p", { class: "flags" }), el("ul", { class: "verify", "aria-label": "Sentence verification" }));
  turns.push({ li, info: null });
  $("#conversation").append(li);
  return t;
}

let asking = false;
$("#askform").addEventListener("submit", async (ev) => {
  ev.preventDefault();
  const q = $("#question").value.trim();
  if (!q || asking) return;
  asking = true;
  $("#askbtn").disabled = true;
  $("#samples").hidden = true;
  $("#status").textContent = "Retrieving...";
  const t = newTurn(q);
  const { li } = turns[t];
  const box = $(".answer", li);
  const earlier = conversation.slice(-MAX_HISTORY);
  let text = "", pending = false, finished = false;
  const paint = () => { pending = false; box.replaceChildren(markdown(text, { cite: citeLink(t) })); };
  try {
    const r = await fetch("/query", { method: "POST", headers: headers(),
                                      body: JSON.stringify({ query: q, stream: true, history: earlier }) });
    if (!r.ok) { const e = await r.json().catch(() => ({})); throw new Error(e.error || ("HTTP " + r.status)); }
    $("#question").value = "";
    box.classList.add("streaming");
    const reader = r.body.getReader();
    const dec = new TextDecoder();
    let buf = "", event = "message";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buf += dec.decode(value, { stream: true });
      let i;
      while ((i = buf.indexOf("\n")) >= 0) {
        const line = buf.slice(0, i).trimEnd(); buf = buf.slice(i + 1);
        if (line.startsWith("event: ")) { event = line.slice(7); continue; }
        if (!line.startsWith("data: ")) { if (!line) event = "message"; continue; }
        const data = line.slice(6);
        if (data === "[DONE]") continue;
        const obj = JSON.parse(data);
        if (event === "sources") {
          turns[t].info = obj;
          renderSources(t);
          $("#status").replaceChildren(...gateLine(obj));
        } else if (event === "done") {
          // (the verification list below says what the "verify:" flag would)
          const flags = obj.flags.filter((f) => !(obj.verification && f.startsWith("verify:")));
          $(".flags", li).textContent = flags.length ? "Flags: " + flags.join("; ") : "";
          renderVerification($(".verify", li), obj.verification, t);
          finished = true;
        } else if (event === "error") {
          throw new Error(obj.error);
        } else if (obj.delta) {
          text += obj.delta;
          if (!pending) { pending = true; requestAnimationFrame(paint); } // one render a frame while streaming
        }
      }
    }
    paint();
    if (finished) conversation.push({ role: "user", content: q }, { role: "assistant", content: text });
  } catch (err) {
    $("#status").replaceChildren(el("span", { class: "refused", text: err.message }));
    if (!text) box.replaceChildren(el("p", { class: "refused", text: "No answer: " + err.message }));
  } finally {
    box.classList.remove("streaming");
    asking = false;
    $("#askbtn").disabled = false;
    $("#newconv").disabled = false;
    $("#followup-hint").hidden = conversation.length === 0;
  }
});

$("#newconv").addEventListener("click", () => {
  conversation.length = 0; turns.length = 0; shownTurn = -1;
  $("#conversation").replaceChildren(); $("#sources").replaceChildren(); $("#status").textContent = "New conversation.";
  $("#newconv").disabled = true; $("#followup-hint").hidden = true;
  $("#samples").hidden = !$("#samples li");
  $("#question").focus();
});

// ------------------------------------------------------------ contributing

const TEXT_SUFFIXES = [".md", ".markdown", ".txt", ".html", ".htm", ".rst", ".ipynb", ".jsonl"];
const STATES = { quarantined: "quarantined - waiting for an admin's review", held: "held for an admin's review", live: "live" };

function describe(r) {
  const found = Object.entries(r.findings || {}).map(([k, v]) => `${k} x${v}`).join(", ");
  const why = r.status === "held" && r.held && r.held.length ? ": " + r.held.join("; ") : "";
  return `${r.doc}: ${STATES[r.status] || r.status}${why}` + (found ? ` (redacted: ${found})` : "");
}

function uploadRow(name) {
  const state = el("span", { class: "state sending", text: "sending" });
  const what = el("span", { text: name });
  const li = el("li", {}, state, " ", what);
  $("#uploads").prepend(li);
  return (cls, label, text) => { state.className = "state " + cls; state.textContent = label; what.textContent = text; };
}

async function uploadFiles(files) {
  const label = $("#droplabel").value;
  for (const f of files) {
    const show = uploadRow(f.name);
    const suffix = f.name.includes(".") ? f.name.slice(f.name.lastIndexOf(".")).toLowerCase() : "";
    if (!TEXT_SUFFIXES.includes(suffix)) {
      show("failed", "not sent", `${f.name}: the server takes text formats (${TEXT_SUFFIXES.join(" ")}); ` +
           "PDF and office files are ingested by the operator with 'microrag ingest'");
      continue;
    }
    try {
      const r = await api("POST", "/ingest", { source: f.name, body: await f.text(), label });
      show(r.status, r.status, describe(r));
    } catch (err) { show("failed", "failed", `${f.name}: ${err.message}`); }
  }
  refreshMine();
  if (me && me.role === "admin") refreshAdmin();
}

const zone = $("#dropzone");
$("#choosefiles").addEventListener("click", () => $("#upfiles").click());
$("#upfiles").addEventListener("change", () => { uploadFiles([...$("#upfiles").files]); $("#upfiles").value = ""; });
const carriesFiles = (ev) => ev.dataTransfer && [...ev.dataTransfer.types].includes("Files");
zone.addEventListener("dragover", (ev) => { if (carriesFiles(ev)) { ev.preventDefault(); zone.classList.add("over"); } });
zone.addEventListener("dragleave", () => zone.classList.remove("over"));
zone.addEventListener("drop", (ev) => {
  ev.preventDefault(); zone.classList.remove("over");
  if (!$("#contribute").hidden) uploadFiles([...ev.dataTransfer.files]);
});
// A file dropped anywhere else is not opened in place of the page (and its conversation).
window.addEventListener("dragover", (ev) => { if (carriesFiles(ev)) ev.preventDefault(); });
window.addEventListener("drop", (ev) => { if (carriesFiles(ev)) ev.preventDefault(); });

$("#uploadform").addEventListener("submit", async (ev) => {
  ev.preventDefault();
  try {
    const r = await api("POST", "/ingest", { source: $("#upsource").value, body: $("#upbody").value, label: $("#uplabel").value });
    $("#upstatus").textContent = describe(r);
    refreshMine();
    if (!$("#admin").hidden) refreshAdmin();
  } catch (err) { $("#upstatus").textContent = "Upload failed: " + err.message; }
});

async function refreshMine() {
  // The caller's own uploads and where each stands: quarantined until screening or review lets it in.
  if (!me) return;
  let docs = [];
  try { docs = await api("GET", "/documents"); } catch (err) { return; }
  const mine = docs.filter((d) => d.principal === "api:" + me.name);
  $("#mine").replaceChildren(...(mine.length ? mine.map((d) => {
    const q = d.label.startsWith("_");
    return el("li", {}, el("span", { class: "state " + (q ? "quarantined" : "live"), text: q ? "quarantined" : "live" }),
              `${d.doc}` + (q ? " - waiting for review" : ` (${d.label}, ${d.n_chunks} chunks)`));
  }) : [el("li", { class: "hint", text: "Nothing uploaded with this key yet." })]));
}

// ------------------------------------------------------------ administering

async function refreshAdmin() {
  const queue = await api("GET", "/review");
  const ul = $("#queue");
  ul.replaceChildren();
  if (!queue.length) ul.append(el("li", { text: "Nothing waiting for review." }));
  for (const item of queue) {
    const approve = el("button", { type: "button", text: "Approve", "aria-label": "Approve " + item.doc });
    const reject = el("button", { type: "button", text: "Reject", "aria-label": "Reject " + item.doc });
    approve.addEventListener("click", () => decide(item.doc, "approve", item.version));
    reject.addEventListener("click", () => decide(item.doc, "reject"));
    // The content being approved, as it will be stored (text only: never rendered as HTML).
    const preview = el("pre", { text: item.preview, class: "preview", tabindex: "0", "aria-label": "Content of " + item.doc });
    ul.append(el("li", {}, el("strong", { text: item.doc }),
      ` by ${item.principal}, label ${item.label}, version ${item.version.slice(0, 12)}` +
      (item.flags.length ? `; flags: ${item.flags.join("; ")}` : ""), approve, reject, preview));
  }
  const rows = await api("GET", "/audit?limit=20");
  const tbody = $("#audit tbody");
  tbody.replaceChildren(...rows.map((r) => el("tr", {}, el("td", { text: r.ts }), el("td", { text: r.principal }),
    el("td", { text: r.action }), el("td", { text: r.query }), el("td", { text: r.decision }))));
  const col = await api("GET", "/audit/collisions");
  $("#collisions").replaceChildren(...(col.length ? col.map((c) => el("li", { text:
    `${c.doc}: surfaced for ${c.queries} queries, mean query similarity ${c.mean_query_similarity}` +
    (c.suspicious ? " - SUSPICIOUS (unrelated queries)" : "") })) : [el("li", { text: "No document surfaces for many queries yet." })]));
}

async function decide(doc, decision, version) {
  const query = version ? `?version=${encodeURIComponent(version)}` : "";
  $("#adminstatus").textContent = "";
  try { await api("POST", `/review/${doc}/${decision}${query}`); } catch (err) { $("#adminstatus").textContent = `${doc}: ${err.message}`; }
  refreshAdmin();
  refreshMine();
}

$("#refreshaudit").addEventListener("click", refreshAdmin);
whoami();
