"""One question through the server's policy, whichever door it came in by.

``/query``, ``/v1/chat/completions`` and the MCP tools all call ``Asking``: the input
guard (on every user message of a conversation, not only the last), the retrieval
query of the conversation (``Engine.condense``), retrieval filtered by the caller's
clearance before ranking, an audit row written before any retrieved text leaves, the
engine's answer, and the output guard on every channel (answer, sources, verification).
What each door adds is only its wire format.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from fastapi import HTTPException

from .. import guard
from ..config import LLMConfig
from ..engine import Answer, Engine, earlier_turns, refused_by
from ..errors import LLMError, MicroRAGError
from ..present import Ref, Shown, numbered
from ..retrieve.conversation import Condensed
from ..runtime.tracing import span
from ..store.base import DocFilter
from ..tools import FileTool
from ..types import Hit, Retrieval, Turn
from .auth import Principal
from .context import ServerContext
from .defences import naive_blocked, naive_despace, naive_output

log = logging.getLogger("microrag")


def guarded(text: str) -> str:
    """``text`` through the output guard: redacted where something was found, else as is
    (``redact`` returns the canonical form, which would garble clean text)."""
    redacted, found = guard.redact(text)
    return redacted if found else text


def shown_name(name: str, ctx: ServerContext) -> str:
    """A document, chunk or collection name as it may leave the server: through the output
    guard like any text (a file named like a live key is a secret in a name, #33 finding 4).
    Every channel that shows a name (sources, chunk ids, citations, the ``/v1`` Sources
    block, MCP, the audit's hit ids, model ids) takes it from here."""
    return guarded(name) if ctx.cfg.output_guard and ctx.on.guard_every_channel else name


def _show_names(row: dict, ctx: ServerContext) -> None:
    """A wire row's ``chunk`` and ``doc`` names, in place, as they may leave (``shown_name``)."""
    for key in ("chunk", "doc"):
        if isinstance(row.get(key), str):
            row[key] = shown_name(row[key], ctx)


def shown_principal(principal: str, who: Principal) -> str:
    """Who uploaded a source, as ``who`` may see it: the operator's OS account (``operator:root``)
    is the server's business, shown to admins only; to everyone else it is "operator"."""
    if principal.startswith("operator:") and who.role != "admin":
        return "operator"
    return principal


@dataclass
class Turned:
    """A question on its way to an answer: what every answer step reads."""

    question: str  # the last user message
    condensed: Condensed
    turns: list[Turn]  # the conversation before the question
    retrieval: Retrieval
    who: Principal
    check: bool  # verify the answer
    deadline: float | None  # time.monotonic() by which to stop; None: no budget
    engine: Engine  # the one that retrieved (a concurrent write may swap the server's)
    sources: list[dict]
    flags: list[str]
    audit: tuple[str, list[dict], str]  # (query as audited, hits, raw)
    row: int | None = None
    settled: list[str] = field(default_factory=list)
    # The hits' neighbours the answer may quote (Retrieval.context), for the wire like sources:
    # a citation of one must be followable, not shown as a chunk nobody retrieved.
    context: list[dict] = field(default_factory=list)
    # The model settings this answer uses, where the caller chose sampling options (None: the server's).
    llm: LLMConfig | None = None
    # The answer for a person (numbered citations, the cited wire rows), set with the answer.
    shown: Shown | None = None
    # The ids the diversity cap pushed out and those held back as restatements, as shown
    # (names: through the output guard, like the sources').
    capped: list[str] = field(default_factory=list)
    held: list[str] = field(default_factory=list)


class Asking:
    """The policy steps of one question, shared by every front door of the server."""

    def __init__(self, ctx: ServerContext) -> None:
        self.ctx = ctx

    def start(self, who: Principal, turns: Sequence[Turn], *, top_k: int | None = None, where: DocFilter | None = None,
              verify: bool | None = None, action: str = "query") -> Turned:
        """Guards, retrieval and the audit row, before any answer: raises ``HTTPException``
        (blocked, 4xx) or ``MicroRAGError`` (empty index, no user message)."""
        cfg, on = self.ctx.cfg, self.ctx.on
        said = [t.content for t in turns if t.role == "user"]
        if not turns or turns[-1].role != "user" or not said[-1].strip():
            raise MicroRAGError("the conversation needs a user message last; send messages ending with role 'user'")
        question = said[-1]
        deadline = time.monotonic() + cfg.request_seconds if on.request_budget else None
        if not on.structural_guards:  # the naive server: de-space, then match literal phrases, anywhere it was said
            q = "\n".join(said) if on.linear_regex else naive_despace("\n".join(said))
            if naive_blocked(q):
                raise HTTPException(400, "blocked by the blocklist")
        flags: list[str] = []
        suspicious: list[str] = []  # what the input guard found: the only thing block mode blocks on
        if on.structural_guards and cfg.input_guard != "off":
            with span("microrag.guard", guard="input", mode=cfg.input_guard) as step:
                # Every message the model will read, the caller's "assistant" turns included: an
                # injection planted in an earlier turn reaches the model as surely as the last one.
                for i, turn in enumerate(turns):
                    if turn.role not in ("user", "assistant"):
                        continue
                    verdict = guard.injection_check(turn.content)
                    where_said = "" if i == len(turns) - 1 else f" ({turn.role} message {i + 1} of {len(turns)})"
                    suspicious += [f"input: {r}{where_said}" for r in verdict.reasons] if verdict.suspicious else []
                step.set(findings=len(suspicious), blocked=bool(suspicious) and cfg.input_guard == "block")
        flags += suspicious
        if suspicious:
            self.ctx.metrics.found("input", {"injection": len(suspicious)})
        asked = "\n".join(said[-3:]) if len(said) > 1 else question  # what the audit row shows
        if len(turns) > 1:
            # The row shows the last user turns; the whole conversation the model read is
            # fingerprinted, so an investigator holding a client's transcript can match it.
            whole = "\n".join(f"{t.role}: {t.content}" for t in turns)
            flags.append(f"conversation: {len(turns)} messages ({len(said)} user), "
                         f"hmac-sha256:{cfg.state.fingerprint(whole)}")
        safe_query, secrets = guard.redact(asked)
        safe_query = guard.canonical(safe_query)  # the audit reads what the checks read (no invisible characters)
        # What was sent, for investigators (an obfuscated attack reads differently once
        # canonicalised) - unless it holds a secret, which never enters the audit trail.
        # (keyed with the server's own secret: a plain hash of a short secret could be guessed offline)
        raw = ("hmac-sha256:" + cfg.state.fingerprint(asked)) if secrets else asked
        # (the conversation's fingerprint is a note, not a finding: a follow-up is not blocked for it)
        if suspicious and cfg.input_guard == "block":
            cfg.state.audit(who.name, action, safe_query, [], "blocked", flags, raw)
            raise HTTPException(400, "the question was blocked by the input guard: "
                                + "; ".join(f.removeprefix("input: ") for f in suspicious))
        eng = self.ctx.current(who)
        if eng is None:
            raise MicroRAGError("the index is empty; ingest documents first")
        condensed = eng.condense(list(turns), cfg.llm, scope=who.name)
        if condensed.how != "alone":
            # The rewritten query is what was searched for: the caller and the audit see it,
            # through the output guard (a model's rewrite is model output).
            flags.append(guarded(condensed.note()))
        with cfg.store.reading_after(who.wrote), self.ctx.metrics.step("retrieve"):  # a lagging standby waits
            r = eng.retrieve(condensed.query, safeguards=True, labels=sorted(who.clearance), scoped=on.scoped_statistics,
                             top_k=top_k, where=where)
        if r.held:
            flags.append(f"mimicry: {len(r.held)} passage(s) restate the question word for word and were held back "
                         f"from the answer: {', '.join(sorted({shown_name(i.rsplit('#', 1)[0], self.ctx) for i, _ in r.held}))}")
        elif r.restating:
            flags.append("mimicry: every passage found restates the question word for word (how a PoisonedRAG passage "
                         "is written): check the sources before relying on the answer")
        r = eng.with_context(r)  # fetched now, under the retrieval's clearance, so the caller sees them too
        records = eng.records  # loaded with the engine: no store round trip per query

        def wire(h: Hit) -> dict:
            return {"doc": shown_name(h.chunk.doc, self.ctx), "chunk": h.chunk.index, "id": shown_name(h.chunk.id, self.ctx),
                    "page": h.chunk.page,
                    "hybrid": h.hybrid, "kw": h.kw, "em": h.em, "raw_kw": h.raw_kw, "raw_em": h.raw_em,
                    # Chunk text leaves through the same output guard as the answer (red team #10).
                    "text": guarded(h.chunk.text) if cfg.output_guard and on.guard_every_channel else h.chunk.text,
                    # The document's real title (front matter, first heading), for a list a person reads.
                    "title": shown_name(eng.title(h.chunk.doc), self.ctx),
                    "label": records[h.chunk.doc].label if h.chunk.doc in records else "",
                    "principal": shown_principal(records[h.chunk.doc].principal if h.chunk.doc in records else "", who),
                    "ingested_at": records[h.chunk.doc].ingested_at if h.chunk.doc in records else ""}

        sources = [wire(h) for h in r.hits]
        hits = [{"id": shown_name(h.chunk.id, self.ctx), "hybrid": round(h.hybrid, 4)} for h in r.hits]
        check = cfg.verify if verify is None else verify
        turned = Turned(question, condensed, earlier_turns(turns), r, who, check, deadline, eng, sources, flags,
                        (safe_query, hits, raw), context=[wire(h) for h in r.context or []],
                        capped=[shown_name(i, self.ctx) for i in r.capped], held=[shown_name(i, self.ctx) for i, _ in r.held])
        # The audit row goes in before any retrieved text can leave (stream or not), so a
        # client that disconnects after the sources still leaves a trace (red team #5).
        # The lab baseline writes it after the answer, as version one did.
        if on.audit_first:
            turned.row = cfg.state.audit(who.name, action, safe_query, hits, "retrieved", flags, raw)
        return turned

    def search(self, who: Principal, query: str, *, top_k: int | None = None, where: DocFilter | None = None) -> Turned:
        """Retrieval only (``/search``, MCP ``search``): :meth:`start`, settled as retrieved or refused."""
        turned = self.start(who, [Turn("user", query)], top_k=top_k, where=where, verify=False, action="search")
        self.settle(turned, "refused" if turned.retrieval.refused else "retrieved", turned.flags, action="search")
        return turned

    def shown(self, turned: Turned, ans: Answer) -> Shown:
        """The answer as a person reads it (``present``): numbered citations and the cited
        sources only, as wire rows (names, titles and text as they may leave). A refusal cites nothing."""
        return turned.shown if turned.shown is not None and not ans.refused else Shown(ans.text, [])

    def _numbered(self, turned: Turned, raw: str) -> Shown:
        """``raw`` (the answer before the output guard) numbered against the passages by their
        real names - a guarded name in the text may not be redacted as the name alone is -
        then guarded as the answer is, its entries the wire rows."""
        r = turned.retrieval
        pairs = [*zip(r.hits, turned.sources), *zip(r.context or [], turned.context)]
        wire = {(h.chunk.doc, h.chunk.index): Ref(s["doc"], s["chunk"], s["page"], s["title"], s["text"]) for h, s in pairs}
        shown = numbered(raw, [Ref(h.chunk.doc, h.chunk.index, h.chunk.page) for h, _ in pairs])
        return Shown(self._guard_text(shown.text)[0], [wire[(c.doc, c.chunk)] for c in shown.cited])

    def _guard_text(self, text: str) -> tuple[str, list[guard.Finding]]:
        """An answer's text through the output guard, and what it found."""
        if not self.ctx.on.structural_guards:
            return naive_output(text), []
        if self.ctx.cfg.output_guard:
            with self.ctx.metrics.step("guard"), span("microrag.guard", guard="output") as step:
                redacted, found = guard.redact(text)
                step.set(findings=len(found))
            if found:
                self.ctx.metrics.found("output", guard.summary(found))
                return redacted, found
        return text, []

    def conflicts(self, ans: Answer) -> list[dict]:
        """The answer's conflicts for the wire, their quoted passages through the output guard."""
        out = [c.to_dict() for c in ans.conflicts]
        if self.ctx.cfg.output_guard and self.ctx.on.guard_every_channel:
            for c in out:
                for src in c["sources"]:
                    src["text"] = guarded(src["text"])
                    _show_names(src, self.ctx)
        return out

    def settle(self, turned: Turned, decision: str, flags: list[str], action: str = "query") -> None:
        """The outcome in the audit row (written now when the row was not written first)."""
        state = self.ctx.cfg.state
        if turned.row is None:
            query, hits, raw = turned.audit
            state.audit(turned.who.name, action, query, hits, decision, flags, raw)
        else:
            state.settle(turned.row, decision, flags)

    def answer(self, turned: Turned, action: str = "query", settle: bool = True) -> tuple[Answer, dict | None]:
        """The engine's answer, then what the server adds: the output guard on every channel.
        Settles the audit row: on an error always; on success now when the row was written
        first (hardened), else unless ``settle=False``: the lab baseline's stream settles with
        :meth:`done` once the last piece has left, as version one did, so its audit-after-answer
        stays evadable by hanging up (red team #5)."""
        try:
            ans, checked = self._answer(turned)
        except Exception as exc:  # the row says so; the error itself goes on to its handler
            detail = exc.detail if isinstance(exc, HTTPException) else type(exc).__name__
            self.settle(turned, "error", turned.flags + [f"answer: {detail}"], action)
            raise
        if settle or turned.row is not None:  # a row written first is settled now: a hang-up loses nothing
            self.done(turned, ans, action)
        return ans, checked

    def done(self, turned: Turned, ans: Answer, action: str = "query") -> None:
        """Settle the audit row of an answer that was given (once)."""
        if turned.settled:
            return
        turned.settled.append("done")
        if ans.refused:
            self.ctx.metrics.refused(refused_by(ans))
        self.settle(turned, "refused" if ans.refused else "answered", turned.flags + ans.flags, action)

    def _answer(self, turned: Turned) -> tuple[Answer, dict | None]:
        cfg, on = self.ctx.cfg, self.ctx.on
        try:
            began = time.perf_counter()
            ans = turned.engine.answer(turned.question, turned.retrieval, turned.llm or cfg.llm, spotlight=on.spotlight,
                                       verify=turned.check, deadline=turned.deadline, history=turned.turns,
                                       tools=FileTool(cfg.tools_dir, turned.who.clearance, confined=on.confined_tool))
        except LLMError as exc:
            # The endpoint's address and reply are the operator's business, not the caller's.
            log.warning("LLM call failed: %s", exc)
            raise HTTPException(502, "the language model is unavailable; try again later") from None
        self.ctx.metrics.observe("answer", time.perf_counter() - began)
        if ans.verification is not None:
            self.ctx.metrics.observe("verify", ans.verify_seconds)
        turned.shown = None if ans.refused else self._numbered(turned, ans.text)
        ans.text, found = self._guard_text(ans.text)
        if found:
            ans.flags.append("output: redacted " + ", ".join(f"{k} x{v}" for k, v in guard.summary(found).items()))
        if cfg.output_guard and on.guard_every_channel:  # a tool's file is output too: the same guard
            ans.tools = [replace(t, call=guarded(t.call), output=guarded(t.output), refused=guarded(t.refused))
                         for t in ans.tools]
        verification = ans.verification.to_dict() if ans.verification else None
        if verification is not None:
            verification["text"] = ans.text  # what the caller actually receives
            if cfg.output_guard and on.guard_every_channel:  # the sentences are model output too
                for row in verification["sentences"]:
                    row["sentence"] = guard.redact(row["sentence"])[0]
                    # `missing` quotes the raw sentence: keep only what survived redaction
                    row["missing"] = [m for m in row["missing"] if m in row["sentence"]]
                    _show_names(row, self.ctx)  # the chunk a sentence was checked against is a name
        return ans, verification
