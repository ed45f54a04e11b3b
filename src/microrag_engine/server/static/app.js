// microRAG web UI: ask and follow up, watch the answer stream in, see why each chunk came
// back and which sentence each chunk supports; contributors drop files, admins review.
// Plain browser JavaScript, no build step. Answers are Markdown rendered by markdown-it
// (raw HTML off) and sanitised by DOMPurify into a DOM fragment; everything else from the
// server (chunks, names, flags) is inserted with textContent only. The page's CSP allows no
// inline script or style and nothing remote, so even a sanitiser bypass could not run or fetch.
"use strict";

const $ = (sel, root = document) => root.querySelector(sel);
let key = sessionStorage.getItem("microrag-key") || "";
let me = null; // /whoami of the current key
const conversation = []; // the conversation so far: {role, content}, sent with each follow-up
const MAX_HISTORY = 40; // the server's bounds on earlier turns (routes/query.py)
const MAX_TURN_CHARS = 16000;
const MAX_HISTORY_JSON = 900000; // under the server's 1 MB body limit, with room for the question
const turns = []; // what each turn showed, so an older citation can bring its sources back
let shownTurn = -1; // the turn whose sources the Sources panel shows
let asking = null; // the question in flight: {controller, epoch}
let epoch = 0; // bumped by "New conversation": answers of an older conversation are dropped
let lastCite = null; // the citation that moved focus into Sources (Escape goes back to it)

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

const pathOf = (doc) => doc.split("/").map(encodeURIComponent).join("/"); // a document name in a URL path
const citeLabel = (id) => { const at = id.lastIndexOf("#"); return `[${id.slice(0, at)} · chunk ${id.slice(at + 1)}]`; };

// ------------------------------------------------------------ Markdown, sanitised

// breaks: a line break is kept (an extractive answer quotes lines: list items, table rows, code)
const md = window.markdownit({ html: false, linkify: false, typographer: false, breaks: true });
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
const CITE = /\[source: (.+?) · chunk (\d+)(?: · p\. \d+)?\]/g; // a paged source adds " · p. N"
const MARK = /\uE000(\d+)\uE001/g; // a citation's place, private-use characters no answer keeps
const LOOKS_CITED = /chunk\s*\d|#\d+\s*\]?\s*$/i; // link text dressed as a citation

function markdown(text, { inline = false, cite = null } = {}) {
  // Citations are swapped for marks before parsing (a document name is not Markdown) and
  // become links after sanitising, built here with the DOM, never from markup.
  const cites = [];
  const src = text.replace(/[\uE000\uE001]/g, "").replace(CITE, (_, doc, k) => `\uE000${cites.push(`${doc}#${k}`) - 1}\uE001`);
  const frag = DOMPurify.sanitize(inline ? md.renderInline(src) : md.render(src), PURIFY);
  for (const h of frag.querySelectorAll("h1, h2, h3, h4, h5, h6")) { // below the page's own headings
    const n = document.createElement("h" + Math.min(6, Number(h.tagName[1]) + 2));
    n.append(...h.childNodes); h.replaceWith(n);
  }
  // a box that scrolls on its own is a named tab stop, so a keyboard can scroll it
  for (const pre of frag.querySelectorAll("pre")) { pre.setAttribute("tabindex", "0"); pre.setAttribute("role", "region"); pre.setAttribute("aria-label", "Code"); }
  for (const t of frag.querySelectorAll("table")) {
    const w = el("div", { class: "tablewrap", tabindex: "0", role: "region", "aria-label": "Table" }); t.replaceWith(w); w.append(t);
  }
  // An external link may not carry a citation nor dress up as one: a planted passage could
  // otherwise wrap "[leave.md · chunk 0]" around a link of its own. Such a link becomes its text.
  for (const a of frag.querySelectorAll("a")) { // (and a link the sanitiser took the address of is just its text)
    if (!a.hasAttribute("href") || a.textContent.includes("\uE000") || LOOKS_CITED.test(a.textContent)) a.replaceWith(...a.childNodes);
  }
  const walker = document.createTreeWalker(frag, NodeFilter.SHOW_TEXT);
  const hits = [];
  for (let n = walker.nextNode(); n; n = walker.nextNode()) if (n.nodeValue.includes("\uE000")) hits.push(n);
  for (const node of hits) {
    const parts = []; let last = 0;
    for (const m of node.nodeValue.matchAll(MARK)) {
      parts.push(node.nodeValue.slice(last, m.index));
      const id = cites[Number(m[1])] || "?#?";
      parts.push(cite ? cite(id) : citeLabel(id));
      last = m.index + m[0].length;
    }
    parts.push(node.nodeValue.slice(last));
    node.replaceWith(...parts);
  }
  for (const a of frag.querySelectorAll("a[href]:not(.cite)")) {
    // A link leaves the page in a new tab and says where it goes: a planted document can
    // word a link any way it likes, but not hide its destination.
    a.target = "_blank"; a.rel = "noopener noreferrer nofollow"; a.title = a.href;
    const where = a.protocol === "mailto:" ? "mail to " + decodeURIComponent(a.href.slice(7)) : a.host;
    const said = a.textContent.trim();
    if (said !== a.href && said !== where) a.after(el("span", { class: "host", text: ` (${where})` }));
  }
  return frag;
}

// ------------------------------------------------------------ identity

async function whoami() {
  try {
    me = await api("GET", "/whoami");
    $("#whoami").textContent = `${me.name} (${me.role}; may read ${me.clearance.join(", ")})`;
    const contributes = me.role === "contributor" || me.role === "admin";
    $("#contribute").hidden = !contributes;
    $("#admin").hidden = me.role !== "admin";
    if (contributes) { offerLabels(me.clearance); refreshMine(); }
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
  // Another key is another person: what the last one asked and read is not theirs to see,
  // nor to send along as history.
  resetConversation(turns.length ? "Key changed: new conversation." : "");
  $("#uploads").replaceChildren(); uploadRows.clear();
  $("#samples ul").replaceChildren(); $("#samples").hidden = true; // the last key's suggestions are not this one's
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
    b.addEventListener("click", () => {
      if (asking) return;
      $("#question").value = s.question;
      $("#question").focus(); // the list hides while the answer comes: keep the focus somewhere
      $("#askform").requestSubmit();
    });
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
  const capped = info.capped || [];
  if (capped.length) {
    const more = capped.length > 3 ? ` and ${capped.length - 3} more` : "";
    parts.push(el("div", { class: "meta", text: `Diversity cap held back: ${capped.slice(0, 3).join(", ")}${more}` }));
  }
  return parts;
}

function renderSources(t) {
  shownTurn = t;
  const info = turns[t].info;
  const list = $("#sources");
  list.replaceChildren();
  // The answer's own sources first (by their number), then the rest it was given.
  const numbers = turns[t].numbers;
  const rank = (s) => (numbers.has(s.id) ? numbers.get(s.id) : Infinity);
  const ranked = [...info.sources].sort((a, b) => rank(a) - rank(b));
  for (const s of ranked) {
    const meta = el("div", { class: "meta" }, el("span", { class: "tag " + s.label, text: s.label }),
                    `${s.doc} · chunk ${s.chunk}`);
    list.append(el("li", { id: "src-" + s.id, tabindex: "-1" }, sourceHead(t, s), meta, chunkText(s)));
  }
  // The hits' neighbours in their documents: the answer may quote them, so its citations land here.
  for (const s of info.context || []) {
    list.append(el("li", { id: "src-" + s.id, tabindex: "-1", class: "context" }, sourceHead(t, s),
      el("div", { class: "meta", text: `${s.doc} · chunk ${s.chunk} · next to a retrieved chunk in its document` }),
      chunkText(s)));
  }
}

function sourceHead(t, s) {
  const n = turns[t].numbers.get(s.id);
  return el("strong", { text: (n ? `[${n}] ` : "") + (s.title || s.doc) });
}

function chunkText(s) {
  // The chunk as its document shows it: Markdown rendered and sanitised (never raw "## 2.1."),
  // a citation tag inside it plain text, not a link.
  return el("div", { class: "chunktext", tabindex: "0", role: "region", "aria-label": `Text of ${s.doc} chunk ${s.chunk}` },
            markdown(s.text));
}

function renderCited(t) {
  // Under the answer: the sources it cites, by number, each a way to its text.
  const box = $(".cited", turns[t].li);
  const items = [...turns[t].numbers].map(([id, n]) => {
    const s = sourceOf(t, id);
    const a = el("a", { href: "#src-" + id, class: "cite", text: s.title || s.doc });
    a.addEventListener("click", (ev) => { ev.preventDefault(); lastCite = a; if (shownTurn !== t) renderSources(t); highlight(id); });
    return el("li", { value: String(n) }, a, el("span", { class: "meta", text: ` — ${s.doc} · chunk ${s.chunk}` }));
  });
  box.replaceChildren(...(items.length ? [el("ol", { "aria-label": "Sources of this answer" }, ...items)] : []));
}

function renderScores(t) {
  // Why these sources: each one's fused, keyword and embedding scores, for whoever checks.
  const info = turns[t].info;
  const box = $(".scores", turns[t].li);
  box.replaceChildren(...info.sources.map((s) => el("div", { class: "scored" },
    el("div", { class: "meta", text: `${s.title || s.doc} — ${s.doc} · chunk ${s.chunk}` }),
    el("div", { class: "bars" }, ...bar("hy", "hybrid", s.hybrid, null), ...bar("kw", "keyword", s.kw, s.raw_kw),
       ...bar("em", "embedding", s.em, s.raw_em)))));
  $(".gate", turns[t].li).replaceChildren(...gateLine(info));
}

function sourceOf(t, id) {
  const info = turns[t] && turns[t].info;
  return info && ([...info.sources, ...(info.context || [])].find((s) => s.id === id) || null);
}

function numberOf(t, id) {
  // Numbered in the order the answer first cites them, [1], [2], ..., the same in its
  // sentences' verification and in the list under it.
  const numbers = turns[t].numbers;
  if (!numbers.has(id)) numbers.set(id, numbers.size + 1);
  return numbers.get(id);
}

function citeLink(t) {
  // A link to a chunk among turn t's sources (an older turn's sources come back first). A
  // citation of anything else - a chunk nobody retrieved - is shown for what it is.
  return (id) => {
    if (!sourceOf(t, id)) return el("span", { class: "cite missing", text: `${citeLabel(id)} (not among this answer's sources)` });
    const n = numberOf(t, id);
    const named = `Source ${n}: ${citeLabel(id).slice(1, -1)}`;
    const a = el("a", { href: "#src-" + id, class: "cite", text: `[${n}]`, title: named, "aria-label": named });
    a.addEventListener("click", (ev) => { ev.preventDefault(); lastCite = a; if (shownTurn !== t) renderSources(t); highlight(id); });
    return a;
  };
}

function highlight(id) {
  document.querySelectorAll("#sources li").forEach((li) => li.classList.remove("highlight"));
  const li = document.getElementById("src-" + id);
  if (li) { li.classList.add("highlight"); li.focus(); li.scrollIntoView({ block: "nearest" }); }
}

$("#sources").addEventListener("keydown", (ev) => { // Escape: back to the citation that led here
  if (ev.key === "Escape" && lastCite && lastCite.isConnected) lastCite.focus();
});

const VERDICT = { entailed: ["ok", "✓ supported"], neutral: ["unsup", "? unsupported"], contradicted: ["bad", "✗ contradicted"] };

function renderVerification(box, v, t) {
  // One row per answer sentence as the verifier split it: the NLI verdict, its probability,
  // the sentence rendered, and the chunk that decided it. A code block is one row, folded.
  box.replaceChildren();
  if (!v) return;
  box.append(el("li", { class: "sum", text: "Verification: " + v.summary }));
  for (const s of v.sentences) {
    // grounded but not about the question: not counted as support (the summary says the same)
    const [cls, label] = s.verdict === "entailed" && s.on_question === false ? ["unsup", "~ off-question"]
                       : VERDICT[s.verdict] || ["unsup", s.verdict];
    const code = /^\s*(```|~~~)/.test(s.sentence);
    const n = s.sentence.split("\n").length - 2;
    const said = code ? el("details", {}, el("summary", { text: `code block (${n} line${n === 1 ? "" : "s"})` }),
                           markdown(s.sentence, { cite: citeLink(t) }))
                      : el("span", { class: "said" }, markdown(s.sentence, { inline: true, cite: citeLink(t) }));
    const row = el("li", { class: "verdict " + cls }, el("span", { class: "badge", text: `${label} ${s.probability.toFixed(2)}` }), said);
    // the chunk that decided it, unless the sentence already cites that very chunk
    const tag = `[source: ${citeLabel(s.chunk || "#").slice(1, -1)}`;
    if (s.chunk && !s.sentence.includes(`${tag}]`) && !s.sentence.includes(`${tag} · p. `)) {
      row.append(el("span", { class: "meta", text: " checked against " }), citeLink(t)(s.chunk));
    }
    box.append(row);
  }
}

function shownFlags(flags, verified) {
  // What a reader needs: the verification list already says what "verify:" would, and the
  // conversation's fingerprint is for the audit trail.
  const out = [];
  for (const f of flags) {
    if ((verified && f.startsWith("verify:")) || /^conversation: \d+ messages/.test(f)) continue;
    const m = /^conversation: retrieval query \((\w+)\) = (".*")$/.exec(f);
    if (m) { try { out.push(`searched for (with the conversation): ${JSON.parse(m[2])}`); continue; } catch (e) { /* as is */ } }
    out.push(f);
  }
  return out;
}

function newTurn(question) {
  const t = turns.length;
  const qid = "q-" + t;
  // The answer and its numbered sources first; scores, the gate and per-sentence
  // verification behind one disclosure, for whoever wants to know why.
  const li = el("li", { class: "turn" }, el("article", { "aria-labelledby": qid },
    el("p", { class: "q", id: qid, text: question }), el("div", { class: "answer" }), el("div", { class: "cited" }),
    el("details", { class: "why" }, el("summary", { text: "Why these sources?" }),
      el("div", { class: "gate" }), el("div", { class: "scores" }), el("p", { class: "flags" }),
      el("ul", { class: "verify", "aria-label": "Sentence verification" })),
    el("a", { class: "jump", href: "#sourcespanel", text: "Sources of this answer" })));
  $(".jump", li).addEventListener("click", () => { if (turns[t] && turns[t].info && shownTurn !== t) renderSources(t); });
  turns.push({ li, info: null, numbers: new Map() });
  $("#conversation").append(li);
  return t;
}

function earlierTurns() {
  // The earlier turns, within the server's bounds: the oldest go first.
  const earlier = conversation.slice(-MAX_HISTORY).map((m) => ({ role: m.role, content: m.content.slice(0, MAX_TURN_CHARS) }));
  const bytes = (x) => new TextEncoder().encode(JSON.stringify(x)).length;
  while (earlier.length && bytes(earlier) > MAX_HISTORY_JSON) earlier.splice(0, 2);
  return earlier;
}

function setAsking(on) {
  $("#askbtn").disabled = on;
  $("#stopbtn").hidden = !on;
  $("#askpanel").setAttribute("aria-busy", on ? "true" : "false");
}

$("#askform").addEventListener("submit", async (ev) => {
  ev.preventDefault();
  const q = $("#question").value.trim();
  if (!q || asking) return;
  const mine = { controller: new AbortController(), epoch };
  asking = mine;
  if (document.activeElement === $("#askbtn")) $("#question").focus(); // the button is about to be disabled
  setAsking(true);
  $("#samples").hidden = true;
  $("#status").textContent = "Retrieving...";
  const t = newTurn(q);
  const { li } = turns[t];
  const box = $(".answer", li);
  const current = () => mine.epoch === epoch; // still this conversation
  let text = "", pending = false, finished = false, stopped = false, refusal = "";
  const paint = () => {
    pending = false;
    // Never after the end (a queued frame would paint over its note), nor under the
    // reader's focus (a link inside the answer would be lost).
    if (current() && !mine.over && !box.contains(document.activeElement)) box.replaceChildren(markdown(text, { cite: citeLink(t) }));
  };
  try {
    const r = await fetch("/query", { method: "POST", headers: headers(), signal: mine.controller.signal,
                                      body: JSON.stringify({ query: q, stream: true, history: earlierTurns() }) });
    if (!r.ok) { const e = await r.json().catch(() => ({})); throw new Error(e.error || ("HTTP " + r.status)); }
    $("#question").value = "";
    box.classList.add("streaming");
    const reader = r.body.getReader();
    const dec = new TextDecoder();
    let buf = "", event = "message";
    for (;;) {
      const { value, done } = await reader.read();
      if (done || !current()) break;
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
          renderScores(t);
          const n = obj.sources.length;
          $("#status").textContent = obj.refused ? "Nothing in the documents comes close." : `Found ${n} passage${n === 1 ? "" : "s"}; answering...`;
        } else if (event === "done") {
          const flags = shownFlags(obj.flags, Boolean(obj.verification));
          $(".flags", li).textContent = flags.length ? "Flags: " + flags.join("; ") : "";
          renderVerification($(".verify", li), obj.verification, t);
          refusal = obj.refused ? obj.reason || "the documents do not answer it" : ""; // whoever refused, not only the gate
          finished = true;
          // Complete and verified: it is history now, whatever happens to the rest of the stream.
          conversation.push({ role: "user", content: q }, { role: "assistant", content: text });
        } else if (event === "error") {
          throw new Error(obj.error);
        } else if (obj.delta) {
          text += obj.delta;
          if (!pending) { pending = true; requestAnimationFrame(paint); } // one render a frame while streaming
        }
      }
    }
    if (!current()) return;
    mine.over = true;
    box.replaceChildren(markdown(text, { cite: citeLink(t) }));
    renderCited(t);
    if (turns[t].info) renderSources(t); // the cited ones first, by number
    if (finished) {
      // Plain words for the reader; the threshold that refused is in "Why these sources?".
      if (refusal) $(".gate", li).append(el("div", { class: "refused", text: `Not answered: ${refusal}.` }));
      $("#status").textContent = refusal ? "Not answered: the documents don't cover it." : "Answer complete.";
    } else {
      box.append(el("p", { class: "refused", text: "(the answer ended early; ask again)" }));
    }
  } catch (err) {
    if (!current()) return;
    mine.over = true;
    stopped = err.name === "AbortError";
    if (stopped && finished) { box.replaceChildren(markdown(text, { cite: citeLink(t) })); return; } // stopped after the end
    const why = stopped ? "stopped" : err.message;
    let hint = "";
    if (!stopped && conversation.length && /\((?:user|assistant) message \d+ of \d+\)/.test(why)) {
      hint = " An earlier message of this conversation is the cause: start a new conversation.";
    }
    $("#status").replaceChildren(el("span", { class: "refused", text: (stopped ? "Stopped." : why) + hint }));
    if (text) box.replaceChildren(markdown(text, { cite: citeLink(t) }), el("p", { class: "refused", text: `(answer ${stopped ? "stopped" : "interrupted: " + why})` }));
    else box.replaceChildren(el("p", { class: "refused", text: stopped ? "Stopped before any answer." : "No answer: " + why }));
  } finally {
    box.classList.remove("streaming");
    if (document.activeElement === $("#stopbtn")) $("#question").focus(); // the button is about to hide
    if (asking === mine) { asking = null; setAsking(false); }
    $("#newconv").disabled = conversation.length === 0 && turns.length === 0;
    $("#followup-hint").hidden = conversation.length === 0;
  }
});

$("#stopbtn").addEventListener("click", () => { if (asking) { asking.controller.abort(); $("#question").focus(); } });

function resetConversation(note) {
  if (asking) { asking.controller.abort(); asking = null; setAsking(false); }
  epoch += 1;
  conversation.length = 0; turns.length = 0; shownTurn = -1; lastCite = null;
  $("#conversation").replaceChildren(); $("#sources").replaceChildren(); $("#status").textContent = note;
  $("#newconv").disabled = true; $("#followup-hint").hidden = true;
  $("#samples").hidden = !$("#samples li");
}

$("#newconv").addEventListener("click", () => { resetConversation("New conversation."); $("#question").focus(); });

// ------------------------------------------------------------ contributing

const TEXT_SUFFIXES = [".md", ".markdown", ".txt", ".html", ".htm", ".rst", ".ipynb", ".jsonl"];
const WAITING = { quarantined: "waiting for an admin's review", held: "held for an admin's review", live: "in the index" };
const uploadRows = new Map(); // doc -> its row's updater, so a later refresh can say it went live

function offerLabels(clearance) {
  // Only the labels this key may publish (an admin may publish any it may read).
  const labels = ["public", ...clearance.filter((l) => l !== "public")];
  for (const sel of [$("#droplabel"), $("#uplabel")]) {
    const was = sel.value;
    sel.replaceChildren(...labels.map((l) => el("option", { text: l })));
    if (labels.includes(was)) sel.value = was;
  }
}

function describe(r) {
  const found = Object.entries(r.findings || {}).map(([k, v]) => `${k} x${v}`).join(", ");
  const why = r.status === "held" && r.held && r.held.length ? ": " + r.held.join("; ") : "";
  return `${r.doc}: ${WAITING[r.status] || r.status}${why}` + (found ? ` (redacted: ${found})` : "");
}

function uploadRow(name) {
  const state = el("span", { class: "state sending", text: "sending" });
  const what = el("span", { text: name });
  $("#uploads").prepend(el("li", {}, state, " ", what));
  return (cls, label, text) => { state.className = "state " + cls; state.textContent = label; if (text) what.textContent = text; };
}

async function uploadFiles(files) {
  const label = $("#droplabel").value;
  const limit = me && me.max_upload_bytes ? me.max_upload_bytes : 1000000;
  const sender = key; // the files dropped are this key's to send: not the next one's if it changes meanwhile
  for (const f of files) {
    if (key !== sender) return;
    const show = uploadRow(f.name);
    const suffix = f.name.includes(".") ? f.name.slice(f.name.lastIndexOf(".")).toLowerCase() : "";
    if (!TEXT_SUFFIXES.includes(suffix)) {
      show("failed", "not sent", `${f.name}: the server takes text formats (${TEXT_SUFFIXES.join(" ")}); ` +
           "PDF and office files are ingested by the operator with 'microrag ingest'");
      continue;
    }
    if (f.size > limit * 0.9) { // the JSON around the text, and its escapes, need the rest
      show("failed", "not sent", `${f.name}: ${Math.round(f.size / 1000)} kB is over this server's upload limit ` +
           `(about ${Math.round(limit * 0.9 / 1000)} kB); split it, or ask the operator to ingest it with 'microrag ingest'`);
      continue;
    }
    try {
      const r = await api("POST", "/ingest", { source: f.name, body: await f.text(), label });
      show(r.status, r.status, describe(r));
      uploadRows.set(r.doc, show);
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
zone.addEventListener("dragleave", (ev) => { if (!zone.contains(ev.relatedTarget)) zone.classList.remove("over"); });
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
    $("#upstatus").textContent = `${r.status}: ${describe(r)}`;
    refreshMine();
    if (!$("#admin").hidden) refreshAdmin();
  } catch (err) { $("#upstatus").textContent = "Upload failed: " + err.message; }
});

async function refreshMine() {
  // The caller's own uploads and where each stands: quarantined until screening or review lets it in.
  if (!me) return [];
  let docs = [];
  try { docs = await api("GET", "/documents"); } catch (err) { return []; }
  const mine = docs.filter((d) => d.principal === "api:" + me.name);
  const listed = new Set(mine.map((d) => d.doc));
  for (const [doc, row] of uploadRows) { // rejected by a reviewer, or deleted
    if (!listed.has(doc)) { row("failed", "gone", `${doc}: rejected or deleted`); uploadRows.delete(doc); }
  }
  $("#mine").replaceChildren(...(mine.length ? mine.map((d) => {
    const q = d.label.startsWith("_");
    const row = uploadRows.get(d.doc);
    if (row) row(q ? "quarantined" : "live", q ? "quarantined" : "live", `${d.doc}: ${q ? WAITING.quarantined : WAITING.live}`);
    return el("li", {}, el("span", { class: "state " + (q ? "quarantined" : "live"), text: q ? "quarantined" : "live" }),
              ` ${d.doc}` + (q ? ` - ${WAITING.quarantined}` : ` (${d.label}, ${d.n_chunks} chunks)`));
  }) : [el("li", { class: "hint", text: "Nothing uploaded with this key yet." })]));
  return mine;
}

// While something of the caller's waits for review, look again now and then: an admin's
// approval elsewhere shows up here without a reload.
setInterval(() => {
  if (me && !$("#contribute").hidden && document.visibilityState === "visible" && $("#mine .state.quarantined")) refreshMine();
}, 20000);

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
    const preview = el("pre", { text: item.preview, class: "preview", tabindex: "0", role: "region", "aria-label": "Content of " + item.doc });
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
  const status = $("#adminstatus");
  try {
    await api("POST", `/review/${pathOf(doc)}/${decision}${query}`);
    status.className = "done-note";
    status.textContent = `${decision === "approve" ? "Approved" : "Rejected"} ${doc}.`;
  } catch (err) { status.className = "failed-note"; status.textContent = `${doc}: ${err.message}`; }
  await refreshAdmin();
  // The button pressed is gone with the old queue: the focus goes to the queue's next item, or its heading.
  const next = $("#queue button");
  (next || $("#adm-h")).focus();
  refreshMine();
}

$("#refreshaudit").addEventListener("click", refreshAdmin);
whoami();
