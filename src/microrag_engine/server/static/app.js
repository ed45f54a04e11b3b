// microRAG web UI: ask, watch the answer stream in, see why each chunk came back.
// Plain browser JavaScript, no build step. Text from the server is inserted with
// textContent only, so nothing a document contains can run here.
"use strict";

const $ = (sel) => document.querySelector(sel);
let key = sessionStorage.getItem("microrag-key") || "";

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
  for (const c of children) if (c) e.append(c);
  return e;
}

// ------------------------------------------------------------ identity

async function whoami() {
  try {
    const me = await api("GET", "/whoami");
    $("#whoami").textContent = `${me.name} (${me.role}; may read ${me.clearance.join(", ")})`;
    $("#contribute").hidden = !(me.role === "contributor" || me.role === "admin");
    $("#admin").hidden = me.role !== "admin";
    if (me.role === "admin") refreshAdmin();
  } catch (err) {
    $("#whoami").textContent = err.message;
    $("#contribute").hidden = true; $("#admin").hidden = true;
  }
}

$("#apikey").value = key;
$("#keyform").addEventListener("submit", (ev) => {
  ev.preventDefault();
  key = $("#apikey").value.trim();
  sessionStorage.setItem("microrag-key", key);
  whoami();
});

// ------------------------------------------------------------ asking

function bar(kind, label, value, raw) {
  const fill = el("span");
  fill.style.width = `${Math.max(0, Math.min(1, value)) * 100}%`; // CSSOM, allowed by the page's CSP
  return [el("span", { text: label }),
          el("div", { class: "bar " + kind, role: "meter", "aria-label": label, "aria-valuemin": "0",
                      "aria-valuemax": "1", "aria-valuenow": value.toFixed(3) }, fill),
          el("span", { text: `${value.toFixed(2)}` + (raw === null ? "" : ` (raw ${raw.toFixed(3)})`) })];
}

function renderSources(info) {
  const list = $("#sources");
  list.replaceChildren();
  const gate = info.refused ? `Grounding gate refused: ${info.reason}` :
    `Grounding gate passed (best raw cosine ${info.best_raw_em.toFixed(3)}, best raw keyword ${info.best_raw_kw.toFixed(3)}).`;
  const parts = [el("span", { class: info.refused ? "refused" : "", text: gate })];
  if (info.capped && info.capped.length) {
    parts.push(el("div", { class: "meta", text: `Diversity cap held back: ${info.capped.join(", ")}` }));
  }
  $("#status").replaceChildren(...parts);
  for (const s of info.sources) {
    const bars = el("div", { class: "bars" }, ...bar("hy", "hybrid", s.hybrid, null), ...bar("kw", "keyword", s.kw, s.raw_kw),
                    ...bar("em", "embedding", s.em, s.raw_em));
    const meta = el("div", { class: "meta" }, el("span", { class: "tag " + s.label, text: s.label }),
                    `${s.principal || "operator"} · ${s.ingested_at || ""}`);
    const li = el("li", { id: "src-" + s.id, tabindex: "-1" },
                  el("strong", { text: `${s.doc} · chunk ${s.chunk}` }), meta, bars, el("div", { class: "chunktext", text: s.text }));
    list.append(li);
  }
}

function renderAnswer(text) {
  // Turn "[source: doc · chunk k]" into links to the cited chunk.
  const box = $("#answer");
  box.replaceChildren();
  const re = /\[source: (.+?) · chunk (\d+)\]/g;
  let last = 0, m;
  while ((m = re.exec(text)) !== null) {
    box.append(text.slice(last, m.index));
    const id = `${m[1]}#${m[2]}`;
    const a = el("a", { href: "#src-" + id, class: "cite", text: `[${m[1]} · chunk ${m[2]}]` });
    a.addEventListener("click", (ev) => { ev.preventDefault(); highlight(id); });
    box.append(a);
    last = re.lastIndex;
  }
  box.append(text.slice(last));
}

const VERDICT = { entailed: ["ok", "✓ supported"], neutral: ["unsup", "? unsupported"], contradicted: ["bad", "✗ contradicted"] };

function renderVerification(v) {
  // One row per answer sentence: the NLI verdict, its probability, and the chunk that decided it.
  const list = $("#verify");
  list.replaceChildren();
  if (!v) return;
  list.append(el("li", { class: "meta", text: "Verification: " + v.summary }));
  for (const s of v.sentences) {
    const [cls, label] = VERDICT[s.verdict] || ["unsup", s.verdict];
    const row = el("li", { class: "verdict " + cls },
                   el("span", { class: "badge", text: `${label} ${s.probability.toFixed(2)}` }), " ",
                   s.sentence.replace(/\s*\[source: [^\]]*\]/g, ""));  // the link below says where
    if (s.chunk) {
      const a = el("a", { href: "#src-" + s.chunk, class: "cite", text: ` [${s.chunk}]` });
      a.addEventListener("click", (ev) => { ev.preventDefault(); highlight(s.chunk); });
      row.append(a);
    }
    list.append(row);
  }
}

function highlight(id) {
  document.querySelectorAll("#sources li").forEach((li) => li.classList.remove("highlight"));
  const li = document.getElementById("src-" + id);
  if (li) { li.classList.add("highlight"); li.focus(); li.scrollIntoView({ block: "nearest" }); }
}

$("#askform").addEventListener("submit", async (ev) => {
  ev.preventDefault();
  const q = $("#question").value.trim();
  if (!q) return;
  $("#answer").textContent = ""; $("#flags").textContent = ""; $("#status").textContent = "Retrieving...";
  $("#verify").replaceChildren();
  $("#askbtn").disabled = true;
  let text = "";
  try {
    const r = await fetch("/query", { method: "POST", headers: headers(), body: JSON.stringify({ query: q, stream: true }) });
    if (!r.ok) { const e = await r.json().catch(() => ({})); throw new Error(e.error || ("HTTP " + r.status)); }
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
        if (event === "sources") renderSources(obj);
        else if (event === "done") {
          $("#flags").textContent = obj.flags.length ? "Flags: " + obj.flags.join("; ") : "";
          renderVerification(obj.verification);
        }
        else if (obj.delta) { text += obj.delta; $("#answer").textContent = text; }
      }
    }
    renderAnswer(text);
  } catch (err) {
    $("#status").replaceChildren(el("span", { class: "refused", text: err.message }));
  } finally {
    $("#askbtn").disabled = false;
  }
});

// ------------------------------------------------------------ contributing

$("#uploadform").addEventListener("submit", async (ev) => {
  ev.preventDefault();
  try {
    const r = await api("POST", "/ingest", { source: $("#upsource").value, body: $("#upbody").value, label: $("#uplabel").value });
    const found = Object.entries(r.findings).map(([k, v]) => `${k} x${v}`).join(", ");
    const state = r.status === "quarantined" ? "quarantined - waiting for an admin's review"
      : r.status === "held" ? "held for an admin's review: " + (r.held || []).join("; ") : "live";
    $("#upstatus").textContent = `${r.doc}: ${state}` + (found ? ` (redacted: ${found})` : "");
    if (!$("#admin").hidden) refreshAdmin();
  } catch (err) { $("#upstatus").textContent = "Upload failed: " + err.message; }
});

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
    const preview = el("pre", { text: item.preview, class: "preview" });
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
  try { await api("POST", `/review/${doc}/${decision}${query}`); } catch (err) { alert(err.message); }
  refreshAdmin();
}

$("#refreshaudit").addEventListener("click", refreshAdmin);
whoami();
