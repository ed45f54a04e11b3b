"""What enters the index and who owns it: /documents, /ingest, DELETE /documents, /review, /reset.

Uploads are parsed as the operator's loader parses files, bound to the caller's
namespace (``@name/...``), owned by provenance, and quarantined until an admin approves
the exact version shown in the queue - unless the key is trusted and screening
(``server.screening``) finds nothing to hold it for.
"""

from __future__ import annotations

import logging
import re

from fastapi import APIRouter, Depends, HTTPException
from pydantic import BaseModel, Field

from ... import guard
from ...errors import MicroRAGError
from ...ingest import delete_documents, guarded, ingest_documents, redacted_id
from ...load import jsonl_documents, load_documents, parse_upload, split_front_matter
from ...store.base import StaleVersion
from ...types import Document
from ..auth import ANONYMOUS, Principal
from ..context import ServerContext
from ..state import QUARANTINE

log = logging.getLogger("microrag")


class IngestIn(BaseModel):
    source: str = Field(min_length=1, max_length=300)
    body: str = Field(min_length=1)
    label: str | None = Field(default=None, max_length=40, pattern=r"^[a-z][a-z0-9_-]*$")


def _listing(d, who: Principal, private: bool = True) -> dict:
    """What /documents shows of a document (red team #4).

    Never ``content_hash``: it is taken over the text *before* DLP redaction, so anyone
    holding it can test guesses for a redacted value offline. The file it came from
    (an absolute server path, the operator's account) is for admins only.
    ``private=False`` is the lab baseline: the whole record.
    """
    if not private:
        return dict(d.__dict__)
    out = {"doc": d.doc, "label": d.label, "n_chunks": d.n_chunks, "ingested_at": d.ingested_at,
           "principal": d.principal if d.principal.startswith("api:") else "operator"}
    if who.at_least("admin"):
        out.update(principal=d.principal, origin=d.origin)
    return out


PREVIEW_CHARS = 20_000  # of an upload, in the review queue


def _namespace(key_name: str) -> str:
    """Where a key's uploads live: "@name". Operator files come from folders on disk and
    are owned by the operator; uploads are owned by their key, and ownership (not the
    path) decides who may replace or delete, so even a folder named "@x" is safe."""
    return "@" + key_name


def _safe_source(source: str) -> str:
    """A relative, traversal-free path fragment for a document name."""
    parts = [p for p in re.split(r"[\\/]+", guard.canonical(source)) if p not in ("", ".", "..")]
    name = "/".join(re.sub(r"[^\w.@-]", "_", p) for p in parts)
    if not name:
        raise MicroRAGError("source must name a document, e.g. 'runbooks/vpn.md'")
    return name


def router(ctx: ServerContext) -> APIRouter:
    router = APIRouter()
    cfg, on = ctx.cfg, ctx.on

    def _relabel(doc: str, label: str, version: str) -> None:
        try:
            cfg.store.relabel(doc, label, version=version)
        except StaleVersion as exc:
            raise HTTPException(409, f"{exc}: another upload replaced it meanwhile; review or upload again") from None

    @router.get("/documents")
    def documents(who: Principal = Depends(ctx.principal)) -> list[dict]:
        docs = cfg.store.documents().values()
        visible = [d for d in docs if who.role == "admin" or d.label in who.clearance
                   or (who is not ANONYMOUS and d.principal == f"api:{who.name}")]
        return [_listing(d, who, on.private_listing) for d in visible]

    # ------------------------------------------------------------ writing

    @router.post("/ingest")
    def ingest(body: IngestIn, who: Principal = Depends(ctx.need("contributor"))) -> dict:
        # Bound to the caller, in a namespace no operator file maps to ("@name/...": see
        # _namespace), and never over a document someone else owns.
        name = f"{_namespace(who.name)}/{_safe_source(body.source)}" if on.namespaced_uploads else body.source
        # A name goes through DLP as the text does (#33). A file on disk is stored under its
        # redacted name; an upload is refused instead, since two uploads named like different
        # keys would redact to one document and the second would replace the first.
        in_name = redacted_id(name, "", cfg.settings.dlp_presidio)[1] if cfg.settings.dlp != "off" else {}
        if in_name and cfg.settings.dlp == "redact":
            raise MicroRAGError(f"the document name holds what looks like a secret ({', '.join(sorted(in_name))}); "
                                "upload it under another name")
        if on.confined_records:
            # Parsed as the operator's loader parses a file; every document it yields must
            # be this upload itself (a .jsonl record naming another document is refused).
            docs = parse_upload(name, body.body, cfg.settings.markup)
            strays = sorted({d.path for d in docs} - {name})
            if strays:
                raise HTTPException(400, f"a record names document {strays[0]!r}; records of an uploaded .jsonl "
                                         "belong to that upload: drop their \"doc\" field or upload each document itself")
        else:  # the lab baseline: the body as sent, .jsonl records naming any document (red team #12),
            # front matter kept as filter fields as written (#33, 1)
            meta, text = split_front_matter(body.body)
            docs = (jsonl_documents(body.body, name) if name.endswith(".jsonl")
                    else [Document(name, text, meta=tuple(meta.items()))])
        if not any(d.text.strip() for d in docs):
            raise MicroRAGError("the upload holds no text (an HTML page with nothing visible, or empty records)")
        doc = name if name in {d.path for d in docs} else docs[0].path
        with cfg.store.writing():  # ownership as the primary has it, not a lagging standby
            stored_now = cfg.store.documents()
        for d in docs:
            owner = stored_now.get(d.path)
            if owner is not None and on.namespaced_uploads and owner.principal != f"api:{who.name}":
                raise HTTPException(409, f"{d.path!r} belongs to someone else; upload under another name")
        label = body.label or "public"
        if label not in who.clearance and who.role != "admin":
            raise HTTPException(403, f"you may not publish {label!r} documents")
        # What will be stored (entities decoded, hidden HTML gone), not the raw markup.
        hostile = guard.injection_check("\n".join(d.text for d in docs))
        flags = [f"content: {r}" for r in hostile.reasons] if hostile.suspicious else []
        # Screening holds an upload whoever sent it (#19): a trusted key skips review, not reading.
        held = ctx.screening.content(name, body.body, docs) if on.screening else []
        live_now = who.trusted and not on.screening  # else probed under quarantine first
        # The stored form and its DLP verdict, from the text itself: an unchanged re-upload writes
        # nothing, so the ingest report would say nothing (and "restricted" must stick).
        stored, restrict, _ = guarded(docs[0], cfg.settings, on.visible_store)
        restrict = restrict or bool(in_name)  # under --dlp label: a name with a finding restricts as the text would
        # (writing: every read below comes from the primary - another replica may have just written)
        with ctx.lock, cfg.store.writing():
            report = ingest_documents(cfg.store, docs, cfg.settings, label=label if live_now else QUARANTINE,
                                      principal=f"api:{who.name}", visible=on.visible_store)
            findings = report.findings.get(doc, {})
            # The version screened is the version that goes live: a newer upload of the same name
            # through another replica meanwhile makes the relabel fail (409), never go live unread.
            version = cfg.store.documents()[doc].content_hash
            if restrict and cfg.settings.dlp == "label":
                label = "restricted"
                if live_now:
                    _relabel(doc, label, version)
            if on.screening:
                try:
                    ctx.reload(by=who)  # the upload's chunks and vectors, not live, for the collision probe
                    if ctx.engine is not None:
                        held += ctx.screening.copies(ctx.engine, doc, f"api:{who.name}")
                        # ranked against what the uploader may read, never the label DLP gave it
                        held += ctx.screening.collision(ctx.engine, doc, who.clearance | {body.label or "public"})
                except Exception as exc:  # a failed check holds: the upload waits for a person, not lost
                    log.exception("screening %s failed", doc)
                    held.append(f"screening failed ({type(exc).__name__}): held for review")
            go_live = who.trusted and not held
            if go_live and not live_now:
                _relabel(doc, label, version)
            if not go_live:
                # The queue shows what will go live - the stored form, homoglyphs and all - and
                # its version; approval names that version. Held uploads carry the reasons.
                preview = stored.text[:PREVIEW_CHARS] + (f"\n[... {len(stored.text) - PREVIEW_CHARS} more characters]"
                                                         if len(stored.text) > PREVIEW_CHARS else "")
                cfg.state.queue(doc, label, who.name, findings, list(dict.fromkeys(flags + held)), version, preview)
            ctx.reload(by=who)
        status = "live" if go_live else "held" if who.trusted else "quarantined"
        cfg.state.audit(who.name, "ingest", doc, [], status, list(dict.fromkeys(flags + held)))
        ctx.metrics.upload(status)
        return {"doc": doc, "status": status, "label": label, "chunks": report.chunks_written,
                "findings": findings, "flags": flags, "held": held}

    @router.delete("/documents/{doc:path}")
    def delete(doc: str, who: Principal = Depends(ctx.need("contributor"))) -> dict:
        with cfg.store.writing():
            record = cfg.store.documents().get(doc)
        # Ownership is provenance (who uploaded it), not a path prefix a key name could mimic.
        if who.role != "admin" and (record is None or record.principal != f"api:{who.name}"):
            raise HTTPException(403, "you may only delete your own documents")
        with ctx.lock, cfg.store.writing():
            delete_documents(cfg.store, [doc])
            cfg.state.take(doc)
            ctx.reload(by=who)
        cfg.state.audit(who.name, "delete", doc, [], "deleted", [])
        return {"deleted": doc}

    @router.get("/review")
    def review(who: Principal = Depends(ctx.need("admin"))) -> list[dict]:
        return cfg.state.pending()

    @router.post("/review/{doc:path}/{decision}")
    def decide(doc: str, decision: str, version: str | None = None, who: Principal = Depends(ctx.need("admin"))) -> dict:
        """Approve or reject a queued upload. Approval names the ``version`` the reviewer
        read (from GET /review): a newer upload under the same name is not approved with it."""
        if decision not in ("approve", "reject"):
            raise HTTPException(404, "use /review/<doc>/approve?version=<version> or /review/<doc>/reject")
        if decision == "approve" and not version:
            raise HTTPException(422, "approving needs ?version=<the version shown by GET /review>")
        held_file = next((e["origin"] for e in cfg.state.pending() if e["doc"] == doc and e["origin"]), "")
        if held_file and decision == "approve":  # not in the index: it was never written
            raise HTTPException(409, f"{doc!r} was held by an operator's ingest and is not in the index; release it "
                                     f"where the file is: microrag review release {held_file}")
        with ctx.lock, cfg.store.writing():
            entry = cfg.state.take(doc, version if decision == "approve" else None)
            if entry is None:
                raise HTTPException(404, f"{doc!r} is not waiting for review")
            if entry.get("stale"):
                raise HTTPException(409, f"{doc!r} changed since that version was shown (now {entry['version'][:12]}); "
                                         "review it again")
            if decision == "approve":
                _relabel(doc, entry["label"], entry["version"])
                cfg.state.approve(doc, entry["version"], who.name)
            elif held_file:
                cfg.state.reject(doc, entry["version"], who.name)  # the operator's next ingest holds it silently
            else:
                delete_documents(cfg.store, [doc])
            ctx.reload(by=who)
        cfg.state.audit(who.name, "review", doc, [], decision, [])
        ctx.metrics.upload("approved" if decision == "approve" else "rejected")
        return {"doc": doc, "decision": decision}

    @router.post("/reset")
    def reset(who: Principal = Depends(ctx.need("admin"))) -> dict:
        if not cfg.corpus:
            raise MicroRAGError("this server was started without a corpus to reset from (serve --corpus PATH)")
        with ctx.lock, cfg.store.writing():
            docs = load_documents(cfg.corpus, cfg.settings.markup)
            report = ingest_documents(cfg.store, docs, cfg.settings, principal=f"operator:{who.name}", prune_others=True)
            ctx.reload(by=who)
        cfg.state.audit(who.name, "reset", ",".join(cfg.corpus), [], report.summary(), [])
        return {"summary": report.summary(), "generation": report.generation}

    return router
