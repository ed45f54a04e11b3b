#!/usr/bin/env python3
"""Helpers for scripts/try-open-webui.sh: a recording reverse proxy, a Playwright driver, a report.

  try_open_webui.py proxy --port P --upstream http://127.0.0.1:M --out DIR
      Forwards everything to microrag. Each request to /v1/* is written to DIR as a numbered
      JSON file (method, path, headers with the Authorization value dropped, JSON body, microrag's
      status and a summary of its reply). Not forwarded: POST /__step {"step": NAME} (labels the
      requests that follow) and GET /__log (what was recorded, for the driver). Stdlib only.

  try_open_webui.py drive --webui URL --proxy URL ... --out RESULT.json
      Drives Open WebUI in Chromium with Playwright (four questions), takes the screenshots and
      writes what it saw. The full-clearance key for the control question (asked of microrag
      directly, not recorded) comes from $MICRORAG_ADMIN_KEY, never from argv.

  try_open_webui.py report --result RESULT.json ... --report FILE
      benchmarks/results/open-webui.md from the passes' results and fixtures.
"""


from __future__ import annotations

import argparse
import http.client
import json
import os
import re
import sys
import threading
import time
import urllib.parse
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

HOP = {"connection", "keep-alive", "proxy-connection", "proxy-authenticate", "proxy-authorization", "te",
       "trailer", "transfer-encoding", "upgrade", "content-length", "host", "accept-encoding"}
KEY_RX = re.compile(r"mrg_[A-Za-z0-9_\-]+")
# How Open WebUI's task prompts open (open_webui/config.py, DEFAULT_*_PROMPT_TEMPLATE).
TASKS = [("title", "Generate a concise title"), ("tags", "Generate 1-3 broad tags"),
         ("follow_ups", "Predict 3-5 useful messages"), ("queries", "Analyze the chat history to determine the necessity"),
         ("autocomplete", "You are an autocompletion system"), ("image_prompt", "Generate a detailed prompt for am image"),
         ("emoji", "Your task is to reflect the speaker's likely facial expression")]


def kind_of(path: str, body) -> str:
    """The proxy's own guess at what a request is for (Open WebUI sends no marker of its own)."""
    if not path.startswith("/v1/chat/completions"):
        return path.strip("/").replace("/", "-").removeprefix("v1-") or "root"
    try:
        last = next(m for m in reversed(body.get("messages", [])) if m.get("role") == "user")
        text = last["content"] if isinstance(last["content"], str) else json.dumps(last["content"])
    except (StopIteration, AttributeError, KeyError, TypeError):
        return "chat"
    for kind, opening in TASKS:
        if opening in text[:400]:
            return "task-" + kind
    return "task-other" if text.lstrip().startswith("### Task") else "chat"


def summarize(ctype: str, raw: bytes):
    """What microrag answered, short: a JSON body (long strings cut), or a stream's text."""
    text = raw.decode("utf-8", "replace")
    if "text/event-stream" in ctype:
        content, extra, finish, events = [], None, None, 0
        for line in text.splitlines():
            if not line.startswith("data:"):
                continue
            data = line[5:].strip()
            events += 1
            if data == "[DONE]":
                continue
            try:
                ev = json.loads(data)
            except ValueError:
                continue
            for ch in ev.get("choices") or []:
                content.append((ch.get("delta") or {}).get("content") or "")
                finish = ch.get("finish_reason") or finish
            extra = ev.get("microrag", extra)
        return {"stream": True, "events": events, "content": "".join(content), "finish_reason": finish,
                "microrag": trim(extra)}
    try:
        return trim(json.loads(text))
    except ValueError:
        return text[:2000]


def trim(obj, depth=0):
    if isinstance(obj, str):
        return obj if len(obj) <= 4000 else obj[:4000] + f"... [{len(obj)} chars]"
    if isinstance(obj, list):
        return [trim(x, depth + 1) for x in obj[:40]]
    if isinstance(obj, dict):
        return {k: trim(v, depth + 1) for k, v in obj.items()}
    return obj


class Recorder:
    def __init__(self, out: Path):
        self.out, self.lock, self.seq, self.step, self.log = out, threading.Lock(), 0, "startup", []
        out.mkdir(parents=True, exist_ok=True)
        for old in out.glob("[0-9][0-9][0-9]-*.json"):
            old.unlink()

    def write(self, rec: dict) -> None:
        with self.lock:
            self.seq += 1
            rec = {"seq": self.seq, "step": self.step, **rec}
            name = f"{self.seq:03d}-{self.step}-{rec['kind']}.json"
            text = KEY_RX.sub("mrg_<redacted>", json.dumps(rec, indent=2, ensure_ascii=False))
            (self.out / name).write_text(text + "\n")
            self.log.append({k: rec[k] for k in ("seq", "step", "kind", "method", "path", "status", "elapsed_s")}
                            | {"file": name, "response": rec.get("response")})


def make_handler(upstream: str, rec: Recorder):
    up = urllib.parse.urlsplit(upstream)

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, fmt, *args):  # quiet; the fixtures are the log
            pass

        def _body(self) -> bytes:
            if self.headers.get("transfer-encoding", "").lower() == "chunked":
                parts = []
                while True:
                    size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                    if size == 0:
                        self.rfile.readline()
                        return b"".join(parts)
                    parts.append(self.rfile.read(size))
                    self.rfile.readline()
            n = int(self.headers.get("content-length") or 0)
            return self.rfile.read(n) if n else b""

        def _send(self, status: int, obj) -> None:
            data = json.dumps(obj).encode()
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _forward(self) -> None:
            body = self._body()
            if self.path == "/__step" and self.command == "POST":
                rec.step = re.sub(r"[^a-z0-9_-]", "", json.loads(body or b"{}").get("step", "").lower()) or "step"
                return self._send(200, {"step": rec.step})
            if self.path.startswith("/__log"):
                with rec.lock:
                    return self._send(200, list(rec.log))
            t0 = time.monotonic()
            headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP}
            headers["Host"] = up.netloc
            conn = http.client.HTTPConnection(up.hostname, up.port, timeout=300)
            try:
                conn.request(self.command, self.path, body=body or None, headers=headers)
                resp = conn.getresponse()
            except OSError as e:
                self._send(502, {"error": f"proxy: upstream unreachable: {e}"})
                conn.close()
                return
            self.send_response(resp.status, resp.reason)
            for k, v in resp.getheaders():
                if k.lower() not in HOP:
                    self.send_header(k, v)
            length = resp.getheader("content-length")
            captured = []
            if length is not None:
                data = resp.read()
                captured.append(data)
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
            else:
                self.send_header("transfer-encoding", "chunked")
                self.end_headers()
                while True:
                    piece = resp.read1(65536)
                    if not piece:
                        break
                    captured.append(piece)
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
                    self.wfile.flush()
                self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
            conn.close()
            if not self.path.startswith("/v1/"):
                return
            try:
                parsed = json.loads(body) if body else None
            except ValueError:
                parsed = body.decode("utf-8", "replace")[:4000]
            shown = {}
            for k, v in self.headers.items():
                if k.lower() == "authorization":
                    v = v.split(" ", 1)[0] + " <redacted>"
                elif k.lower() == "cookie":
                    v = "<redacted>"
                shown[k] = v
            path, _, query = self.path.partition("?")
            rec.write({"kind": kind_of(path, parsed if isinstance(parsed, dict) else {}),
                       "method": self.command, "path": path, "query": query, "request_headers": shown,
                       "body": parsed, "status": resp.status, "response_content_type": resp.getheader("content-type"),
                       "elapsed_s": round(time.monotonic() - t0, 3),
                       "response": summarize(resp.getheader("content-type") or "", b"".join(captured))})

        do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = do_OPTIONS = do_HEAD = _forward

    return Handler


def cmd_proxy(args) -> None:
    rec = Recorder(Path(args.out))
    server = ThreadingHTTPServer(("127.0.0.1", args.port), make_handler(args.upstream, rec))
    server.daemon_threads = True
    print(f"proxy: 127.0.0.1:{args.port} -> {args.upstream}, recording /v1/* into {args.out}", file=sys.stderr)
    server.serve_forever()


# ----------------------------------------------------------------------------------- driver


def http_json(url: str, body=None, key: str | None = None, timeout: float = 120):
    req = urllib.request.Request(url, data=json.dumps(body).encode() if body is not None else None,
                                 headers={"content-type": "application/json",
                                          **({"authorization": f"Bearer {key}"} if key else {})})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, json.loads(r.read() or b"null")
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"null")


def first_line(e: BaseException) -> str:
    return f"{type(e).__name__}: {(str(e).splitlines() or [''])[0][:200]}"


class Drive:
    ARGS = ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
            "--disable-background-networking", "--disable-component-update", "--disable-sync"]

    def __init__(self, args):
        self.a = args
        self.webui, self.proxy = args.webui.rstrip("/"), args.proxy.rstrip("/")
        self.docs = Path(args.docs)
        self.debug = Path(args.debug_dir)
        self.steps: list[dict] = []
        self.problems: list[str] = []
        self.console: list[str] = []
        self.page = None
        self.model_choice = self.model_shown = "?"

    # -- proxy log
    def log(self) -> list[dict]:
        return http_json(self.proxy + "/__log")[1]

    def set_step(self, name: str) -> None:
        http_json(self.proxy + "/__step", {"step": name})

    def wait_for(self, pred, timeout: float, what: str):
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            hit = [r for r in self.log() if pred(r)]
            if hit:
                return hit
            time.sleep(0.5)
        self.problems.append(f"timed out after {timeout:.0f}s waiting for {what}")
        return []

    def settle(self, quiet: float = 8.0, timeout: float = 120.0) -> None:
        """Let Open WebUI's background tasks run: return once no request has come for `quiet` s."""
        end, last, seen = time.monotonic() + timeout, time.monotonic(), -1
        while time.monotonic() < end:
            n = len(self.log())
            if n != seen:
                seen, last = n, time.monotonic()
            elif time.monotonic() - last >= quiet:
                return
            time.sleep(0.5)

    # -- page helpers
    def dismiss(self) -> None:
        page = self.page
        for label in ("Okay, Let's Go!", "Okay, Let's Go", "Get started", "Dismiss"):
            btn = page.get_by_role("button", name=label)
            try:
                if btn.count() and btn.first.is_visible():
                    btn.first.click(timeout=2000)
                    page.wait_for_timeout(500)
            except Exception:  # noqa: BLE001 - a modal that vanished is fine
                pass

    def selector_button(self):
        return self.page.locator('button[id^="model-selector-"][id$="-button"]').first

    def choose_model(self) -> None:
        page = self.page
        try:
            self.selector_button().click(timeout=10000)
            page.wait_for_timeout(500)
            search = page.get_by_placeholder("Search a model")
            if search.count():
                search.first.fill("microrag", timeout=5000)
                page.wait_for_timeout(700)
            (self.debug / f"{self.a.pass_name}-model-menu.html").write_text(page.content())
            for how, loc in (("option", page.get_by_role("option", name=re.compile(r"^\s*microrag\b"))),
                             ("menuitem", page.get_by_role("menuitem", name=re.compile(r"^\s*microrag\b"))),
                             ("button", page.get_by_role("button", name=re.compile(r"^\s*microrag\s*$")))):
                if loc.count():
                    loc.first.click(timeout=5000)
                    self.model_choice = f"picked 'microrag' in the model selector ({how})"
                    break
            else:
                page.keyboard.press("Enter")  # the search's first hit
                self.model_choice = "typed 'microrag' in the selector's search and pressed Enter"
            page.wait_for_timeout(700)
        except Exception as e:  # noqa: BLE001
            page.keyboard.press("Escape")
            self.problems.append(f"model selector: {first_line(e)}; relying on DEFAULT_MODELS=microrag")
            self.model_choice = "DEFAULT_MODELS=microrag (the selector could not be clicked)"
        try:
            self.model_shown = self.selector_button().inner_text(timeout=3000).strip()
        except Exception:  # noqa: BLE001
            pass

    def ask(self, step: str, question: str, shot: str | None, new_chat: bool) -> dict:
        page = self.page
        self.set_step(step)
        if new_chat:
            page.goto(self.webui + "/", wait_until="domcontentloaded")
            page.wait_for_selector("#chat-input", timeout=60000)
            page.wait_for_timeout(1500)
            self.dismiss()
        before = {r["seq"] for r in self.log()}
        t0 = time.monotonic()
        page.locator("#chat-input").click()
        page.keyboard.type(question)
        page.wait_for_timeout(300)
        page.keyboard.press("Enter")
        chats = self.wait_for(lambda r: r["seq"] not in before and r["kind"] == "chat", 180,
                              f"the chat request of step '{step}'")
        answer, status = "", None
        if chats:
            status = chats[0]["status"]
            resp = chats[0].get("response") or {}
            answer = resp.get("content", "") if isinstance(resp, dict) and resp.get("stream") else reply_text(resp)
            # the first words of a line as the page renders them (no Markdown list/heading marker)
            lines = (re.sub(r"^\s*(?:[-*+>#]+|\d+\.)\s+", "", ln).strip() for ln in answer.splitlines())
            snippet = next((ln for ln in lines if len(ln) > 12), "")[:30]
            if status == 200 and snippet:
                try:
                    page.get_by_text(snippet, exact=False).first.wait_for(timeout=60000)
                except Exception:  # noqa: BLE001
                    self.problems.append(f"{step}: the answer's first words never appeared on the page")
        latency = time.monotonic() - t0
        self.settle()
        page.wait_for_timeout(1500)
        if shot:
            page.screenshot(path=str(self.docs / shot))
        new = [r for r in self.log() if r["seq"] not in before]
        info = {"step": step, "question": question, "screenshot": f"docs/{shot}" if shot else None, "status": status,
                "answer": answer, "seconds_to_answer": round(latency, 1), "page_title": page.title(), "url": page.url,
                "requests": [{"file": r["file"], "kind": r["kind"], "status": r["status"], "elapsed_s": r["elapsed_s"],
                              "reply": reply_text(r.get("response"))} for r in new]}
        try:
            info["shown_answer"] = page.locator("#response-content-container").last.inner_text(timeout=3000)[:1500]
        except Exception as e:  # noqa: BLE001
            info["shown_answer"] = f"({first_line(e)})"
        try:
            info["shown_follow_ups"] = page.locator("text=Follow up").locator("xpath=..").last.inner_text(timeout=1500)[:800]
        except Exception:  # noqa: BLE001
            info["shown_follow_ups"] = None
        info.update(self.stored(page))
        self.steps.append(info)
        return info

    def stored(self, page) -> dict:
        """Title, tags, follow-ups and sources as Open WebUI stored them (its API, with the page's token)."""
        m = re.search(r"/c/([0-9a-f\-]+)", page.url)
        out: dict = {"chat_id": m.group(1) if m else None}
        if not m:
            return out
        js = """async (id) => {
            const h = {authorization: 'Bearer ' + localStorage.token};
            const chat = await (await fetch('/api/v1/chats/' + id, {headers: h})).json();
            const tags = await (await fetch('/api/v1/chats/' + id + '/tags', {headers: h})).json();
            return {chat, tags};
        }"""
        try:
            got = page.evaluate(js, m.group(1))
        except Exception as e:  # noqa: BLE001
            out["stored_error"] = first_line(e)
            return out
        chat = got.get("chat") or {}
        body = chat.get("chat") or {}
        out["title"] = chat.get("title") or body.get("title")
        tags = got.get("tags")
        out["tags"] = [t.get("name", t) if isinstance(t, dict) else t for t in tags] if isinstance(tags, list) else tags
        msgs = list(((body.get("history") or {}).get("messages") or {}).values())
        assistant = sorted((x for x in msgs if x.get("role") == "assistant"), key=lambda x: x.get("timestamp") or 0)
        last = assistant[-1] if assistant else {}
        out["follow_ups"] = last.get("followUps")
        out["sources_in_ui"] = [(s.get("source") or {}).get("name") for s in (last.get("sources") or [])]
        err = last.get("error")
        out["ui_error"] = err.get("content") if isinstance(err, dict) else err
        return out

    def run(self) -> None:
        from playwright.sync_api import sync_playwright

        self.docs.mkdir(parents=True, exist_ok=True)
        shots = {"answer": "answer", "followup": "followup", "refusal": "refusal", "restricted": "restricted"}
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=self.a.chromium, args=self.ARGS)
            ctx = browser.new_context(viewport={"width": 1280, "height": 900})
            page = self.page = ctx.new_page()
            page.on("console", lambda m: self.console.append(f"console {m.type}: {m.text}"[:300])
                    if m.type == "error" else None)
            page.on("response", lambda r: self.console.append(f"HTTP {r.status} {r.request.method} {r.url}"[:300])
                    if r.status >= 400 else None)
            self.set_step("load")
            page.goto(self.webui + "/", wait_until="domcontentloaded")
            page.wait_for_selector("#chat-input", timeout=120000)
            page.wait_for_timeout(2500)
            self.dismiss()
            self.choose_model()
            plan = [("answer", self.a.q_answer, False), ("followup", self.a.q_followup, False),
                    ("refusal", self.a.q_refusal, True), ("restricted", self.a.q_restricted, True)]
            for n, (step, question, new_chat) in enumerate(plan):
                shot = (f"{self.a.shot_prefix}{shots[step]}.png"
                        if self.a.shots == "all" or (self.a.shots == "first" and n == 0) else None)
                self.ask(step, question, shot, new_chat)
            self.set_step("end")
            browser.close()

    def control(self) -> dict:
        """The restricted question asked of microrag directly with the full-clearance key (not recorded)."""
        key = os.environ.get("MICRORAG_ADMIN_KEY")
        if not key:
            return {}
        st, body = http_json(self.a.microrag.rstrip("/") + "/v1/chat/completions",
                             {"model": "microrag", "messages": [{"role": "user", "content": self.a.q_restricted}]}, key)
        return {"status": st, "answer": reply_text(body) if st == 200 else json.dumps(body)}


def reply_text(resp) -> str:
    if isinstance(resp, dict) and resp.get("stream"):
        return resp.get("content") or ""
    if isinstance(resp, dict) and resp.get("choices"):
        return ((resp["choices"][0] or {}).get("message") or {}).get("content") or ""
    if isinstance(resp, dict) and isinstance(resp.get("data"), list):
        return "models: " + ", ".join(str(m.get("id", "?")) for m in resp["data"])
    return json.dumps(resp)[:400]


def log_lines(path: str, pattern: str, limit: int = 30, skip: int = 0) -> list[str]:
    try:
        lines = Path(path).read_text(errors="replace").splitlines()[skip:]
    except OSError:
        return []
    rx = re.compile(pattern)
    return [KEY_RX.sub("mrg_<redacted>", ln)[:300] for ln in lines if rx.search(ln)][-limit:]


def cmd_drive(args) -> int:
    d = Drive(args)
    fatal = None
    try:
        d.run()
    except Exception as e:  # noqa: BLE001 - reported, and the result is still written
        fatal = first_line(e)
        try:
            if d.page:
                shot = Path(args.debug_dir) / f"{args.pass_name}-failure.png"
                d.page.screenshot(path=str(shot))
                (Path(args.debug_dir) / f"{args.pass_name}-failure.html").write_text(d.page.content())
        except Exception:  # noqa: BLE001
            pass
    result = {"pass": args.pass_name, "description": args.description, "fixtures": args.fixtures,
              "model_choice": d.model_choice, "model_shown": d.model_shown, "steps": d.steps,
              "problems": d.problems, "console": d.console, "fatal": fatal, "control": d.control(),
              "owui_log": log_lines(args.owui_log, r"ERROR|WARNING|Traceback"),
              "microrag_log": log_lines(args.microrag_log, r'" [45]\d\d |ERROR|Traceback', skip=args.microrag_log_from)}
    Path(args.out).write_text(KEY_RX.sub("mrg_<redacted>", json.dumps(result, indent=2, ensure_ascii=False)))
    print(f"drive[{args.pass_name}]: {len(d.steps)} steps, {len(d.problems)} problems, fatal={fatal}", file=sys.stderr)
    return 1 if fatal else 0


# ----------------------------------------------------------------------------------- report


def quote(text: str, limit: int = 900) -> str:
    text = (text or "").strip()
    if len(text) > limit:
        text = text[:limit] + " …"
    return "\n".join("> " + ln if ln.strip() else ">" for ln in text.splitlines()) or "> (empty)"


def one_line(text, limit=200) -> str:
    return repr(" ".join(str(text or "").split())[:limit])


def cmd_report(args) -> int:
    results = [json.loads(Path(r).read_text()) for r in args.result]
    L = [f"# Open WebUI {args.owui_version} against `microrag serve`", "",
         "Written by `bash scripts/try-open-webui.sh` (which see for every setting); rerun it to refresh this file,",
         "the screenshots `docs/open-webui-*.png` and the recorded requests in `tests/fixtures/open_webui/`.", "",
         f"- Date: {time.strftime('%Y-%m-%d %H:%M %Z')}",
         f"- CPU: {args.cpu} ({os.cpu_count()} cores visible)",
         f"- Open WebUI: `open-webui=={args.owui_version}` on Python {args.owui_python} (pip install: {args.pip_seconds})",
         f"- Command: `{args.command}`",
         f"- Browser: Debian Chromium ({args.chromium}), headless, 1280x900, driven by Playwright",
         "- Path: Chromium → Open WebUI → recording proxy → `microrag serve` (extractive: no model configured).",
         "  Open WebUI's one connection is the proxy's `/v1` with the **reader** key (public clearance only);",
         f"  `{args.restricted_doc}` is labelled `restricted` in the throwaway index.",
         "- Open WebUI ran offline: `OFFLINE_MODE=true`, `HF_HUB_OFFLINE=1`, no embedding/reranking model"
         " (`RAG_EMBEDDING_MODEL=` empty, `BYPASS_EMBEDDING_AND_RETRIEVAL=True`), web search, image generation,"
         " code interpreter, Ollama off, `WEBUI_AUTH=False`; title, tags and follow-up generation left at their"
         " defaults (on), autocomplete at its default (off).", ""]
    for res in results:
        recs = [json.loads(f.read_text()) for f in sorted(Path(res["fixtures"]).glob("[0-9][0-9][0-9]-*.json"))]
        kinds: dict[str, int] = {}
        for r in recs:
            kinds[f"{r['kind']} ({r['status']})"] = kinds.get(f"{r['kind']} ({r['status']})", 0) + 1
        rel = os.path.relpath(res["fixtures"], args.root)
        L += [f"## Pass `{res['pass']}`: {res['description']}", "",
              f"- Model: {res['model_choice']} (the selector then shows {res['model_shown']!r})",
              f"- Recorded {len(recs)} requests to /v1/* in `{rel}/`: "
              + (", ".join(f"{k}: {v}" for k, v in sorted(kinds.items())) or "none"), ""]
        if res.get("fatal"):
            L += [f"**The drive stopped early:** {res['fatal']}", ""]
        for s in res["steps"]:
            L += [f"### {s['step']}: “{s['question']}”", ""]
            if s.get("screenshot"):
                L += [f"Screenshot: `{s['screenshot']}`", ""]
            L += [f"microrag's reply to the chat request (status {s['status']}, {s['seconds_to_answer']} s from Enter):", "",
                  quote(s["answer"]), "",
                  f"- On the page: {one_line(s.get('shown_answer'), 300)}",
                  f"- Chat title Open WebUI stored: {s.get('title')!r}",
                  f"- Tags stored: {s.get('tags')!r}",
                  f"- Follow-up suggestions stored: {s.get('follow_ups')!r}",
                  f"- Open WebUI's own sources/citations panel: {s.get('sources_in_ui') or 'none'}"
                  " (microRAG's sources show only as the `Sources:` block inside the answer)"]
            if s.get("ui_error"):
                L.append(f"- Error shown in the chat: {one_line(s['ui_error'], 300)}")
            L.append("- Requests Open WebUI sent to /v1 during this step:")
            for r in s["requests"]:
                L.append(f"  - `{r['file']}`: {r['kind']}, status {r['status']}, {r['elapsed_s']} s; reply {one_line(r['reply'], 160)}")
            L.append("")
        c = res.get("control") or {}
        if c:
            restricted = next((s for s in res["steps"] if s["step"] == "restricted"), None)
            leaked = restricted is not None and args.restricted_fact in (restricted.get("answer") or "")
            L += ["### Clearance check", "",
                  f"- Through Open WebUI (reader key), the restricted fact “{args.restricted_fact}” "
                  + ("**appears in the answer: a leak**" if leaked else "does not appear in the answer")
                  + ("" if restricted and restricted.get("status") == 200 else " (but no answer came back at all)"),
                  f"- Control: the same question to microrag directly with the full-clearance key (status {c.get('status')}):",
                  "", quote(c.get("answer"), 500), ""]
        probs = list(res["problems"])
        for r in recs:
            if r["status"] >= 400:
                probs.append(f"microrag returned {r['status']} to {r['method']} {r['path']} ({r['kind']}, step {r['step']},"
                             f" `{r['seq']:03d}`): {one_line(reply_text(r.get('response')), 300)}")
        L += ["### Problems seen", ""] + ([f"- {p}" for p in probs] or ["- none"]) + [""]
        extra = [c for c in res["console"] if "favicon" not in c][:20]
        if extra:
            L += ["Browser console errors and HTTP >= 400 responses the page saw (first 20):", ""]
            L += [f"    {c}" for c in extra] + [""]
        if res["owui_log"]:
            L += ["Open WebUI log, ERROR/WARNING lines (last 30):", ""] + [f"    {ln}" for ln in res["owui_log"]] + [""]
        if res["microrag_log"]:
            L += ["microrag serve log, 4xx/5xx and errors (last 30):", ""] + [f"    {ln}" for ln in res["microrag_log"]] + [""]
    Path(args.report).parent.mkdir(parents=True, exist_ok=True)
    Path(args.report).write_text(KEY_RX.sub("mrg_<redacted>", "\n".join(L)))
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("proxy")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--upstream", required=True)
    p.add_argument("--out", required=True)
    d = sub.add_parser("drive")
    for name in ("webui", "proxy", "microrag", "docs", "out", "fixtures", "chromium", "pass-name", "description",
                 "owui-log", "microrag-log", "debug-dir"):
        d.add_argument("--" + name, required=True)
    d.add_argument("--microrag-log-from", type=int, default=0, help="lines of the log before this pass")
    d.add_argument("--shots", choices=("all", "first", "none"), default="all")
    d.add_argument("--shot-prefix", default="open-webui-")
    d.add_argument("--q-answer", default="how many vacation days do I get?")
    d.add_argument("--q-followup", default="and can I carry them over?")
    d.add_argument("--q-refusal", default="how often is payday?")
    d.add_argument("--q-restricted", default="how much is the on-call stipend per week?")
    r = sub.add_parser("report")
    r.add_argument("--result", action="append", required=True)
    for name in ("report", "root", "owui-version", "owui-python", "pip-seconds", "cpu", "command", "chromium",
                 "restricted-doc", "restricted-fact"):
        r.add_argument("--" + name, required=True)
    args = ap.parse_args()
    if args.cmd == "proxy":
        cmd_proxy(args)
        return 0
    return cmd_drive(args) if args.cmd == "drive" else cmd_report(args)


if __name__ == "__main__":
    sys.exit(main())
