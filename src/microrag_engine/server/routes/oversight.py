"""The page and its icon, who am I, liveness, the audit trail, metrics and keys (admins):
/, /ui, /favicon.ico, /whoami, /health (/live, /ready), /audit, /metrics, /keys."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Annotated, Literal

import numpy as np
from fastapi import APIRouter, Depends, HTTPException, Request, Response
from fastapi.responses import FileResponse, JSONResponse
from pydantic import BaseModel, Field

from ...engine import Engine
from ..auth import ANONYMOUS, Principal
from ..config import UI_HEADERS
from ..context import ServerContext


class KeyIn(BaseModel):
    name: str = Field(min_length=1, max_length=60, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
    role: Literal["reader", "contributor", "admin"]
    clearance: list[Annotated[str, Field(max_length=40, pattern=r"^[a-z][a-z0-9_-]*$")]] = Field(default=["public"],
                                                                                              max_length=20)
    trusted: bool = False


def router(ctx: ServerContext) -> APIRouter:
    router = APIRouter()
    cfg, on = ctx.cfg, ctx.on

    static = Path(__file__).parents[1] / "static"

    @router.get("/", include_in_schema=False)
    def index():
        return FileResponse(static / "index.html", headers=UI_HEADERS)

    @router.get("/favicon.ico", include_in_schema=False)
    def favicon():
        # Browsers ask for it whatever the page links to; the page itself links favicon.svg.
        return FileResponse(static / "favicon.ico", media_type="image/x-icon",
                            headers={"Cache-Control": "public, max-age=86400"})

    @router.get("/whoami")
    def whoami(who: Principal = Depends(ctx.principal)) -> dict:
        # (the upload limit too: the page checks a file's size before sending it)
        return {"name": who.name, "role": who.role, "clearance": sorted(who.clearance), "trusted": who.trusted,
                "max_upload_bytes": cfg.max_body}

    @router.get("/health")
    def health(request: Request) -> dict:
        """Liveness for anyone (no key needed, nothing revealed, no rate budget spent);
        counts for admins only: they include quarantined and restricted documents."""
        has_key = request.headers.get("authorization") or request.headers.get("x-api-key")
        try:
            who = ctx.principal(request) if has_key else ANONYMOUS
        except HTTPException:
            who = ANONYMOUS
        if on.closed_surface and (who is ANONYMOUS or not who.at_least("admin")):
            return {"status": "ok"}
        eng = ctx.engine
        return {"status": "ok", "chunks": eng.n_chunks if eng else 0,
                "documents": eng.n_documents if eng else 0, "generation": eng.generation if eng else 0}

    @router.get("/health/live")
    def live() -> dict:
        """The process answers (an orchestrator restarts it when this fails). Nothing is read."""
        return {"status": "ok"}

    @router.get("/health/ready")
    def ready() -> JSONResponse:
        """Whether this server can answer now (a load balancer sends it traffic only then): its
        index's store answers and, with a model configured, the model does. 503 with the reasons
        otherwise - in words that name no address, key or document."""
        problems = ctx.readiness()
        return JSONResponse({"status": "not ready", "reasons": problems} if problems else {"status": "ready"},
                            status_code=503 if problems else 200)

    @router.get("/metrics", include_in_schema=False)
    def metrics(who: Principal = Depends(ctx.need("admin"))) -> Response:
        """Prometheus's text format, for an admin key (Prometheus sends it as a bearer token:
        ``authorization: {credentials: ...}`` in its scrape config). Counts of refusals and
        uploads say how the index is used: not for anonymous callers."""
        if not ctx.metrics.enabled:
            raise HTTPException(404, "metrics need prometheus-client: pip install 'microrag-engine[server]'")
        body, content_type = ctx.metrics.exposition()
        return Response(body, media_type=content_type)

    @router.get("/audit")
    def audit(limit: int = 100, principal_name: str | None = None, who: Principal = Depends(ctx.need("admin"))):
        return cfg.state.trail(max(1, min(limit, 1000)), principal_name)

    @router.post("/keys")
    def add_key(body: KeyIn, response: Response, who: Principal = Depends(ctx.need("admin"))) -> dict:
        """An admin makes a key (a red team provisioning its positions, an operator without a shell);
        the key is in this response only. A name once used is refused even after revocation: uploads
        are owned by key name, and a new key must not inherit a revoked key's documents."""
        reissue = not on.stable_ownership  # the lab baseline only
        if any(k["name"] == body.name and not (reissue and k["revoked"]) for k in cfg.keys.list()):
            raise HTTPException(409, f"the key name {body.name!r} has been used; choose another")
        key = cfg.keys.add(body.name, body.role, body.clearance, trusted=body.trusted, reissue=reissue)
        kid = key.split("_", 2)[1]
        cfg.state.audit(who.name, "key", body.name, [], f"added {body.role}", [])
        response.headers["Cache-Control"] = "no-store"
        return {"id": kid, "name": body.name, "role": body.role, "clearance": sorted(set(body.clearance) | {"public"}),
                "trusted": body.trusted or body.role == "admin", "key": key}

    @router.delete("/keys/{kid}")
    def revoke_key(kid: str, who: Principal = Depends(ctx.need("admin"))) -> dict:
        live = [k for k in cfg.keys.list() if not k["revoked"]]
        if not any(k["id"] == kid for k in live):
            raise HTTPException(404, f"no live key with id {kid!r}")
        if [k["id"] for k in live if k["role"] == "admin"] == [kid]:
            raise HTTPException(409, "that is the last admin key: make another admin key first (or use 'microrag keys')")
        cfg.keys.revoke(kid, by_name=False)
        cfg.state.audit(who.name, "key", kid, [], "revoked", [])
        ctx.reload()  # an admin revoked: the provenance tiers of its uploads change
        return {"revoked": kid}

    @router.get("/audit/collisions")
    def collisions(min_queries: int = 5, who: Principal = Depends(ctx.need("admin"))):
        return collision_report(cfg.state.trail(1000), ctx.engine, min_queries)

    return router


# Audit actions whose hits answer a caller's question: /query, /search, the OpenAI door's
# chat, MCP's search and answer (fetch and list_collections retrieve nothing).
RETRIEVING = frozenset({"query", "search", "chat", "answer"})


def collision_report(trail: list[dict], engine: Engine | None, min_queries: int = 5) -> list[dict]:
    """Documents that surface for many *unrelated* queries - the mark of an embedding-collision
    or slow-drip attack. Unrelated = low mean pairwise similarity of those queries' embeddings."""
    by_doc: dict[str, set[str]] = defaultdict(set)
    for row in trail:
        if row["action"] in RETRIEVING:
            for h in row["hits"]:
                by_doc[h["id"].rsplit("#", 1)[0]].add(row["query"])
    out = []
    for doc, queries in by_doc.items():
        if len(queries) < min_queries or engine is None:
            continue
        qs = sorted(queries)
        v = engine.index.embedder.embed(qs)
        sim = v @ v.T
        mean = float((sim.sum() - np.trace(sim)) / (len(qs) * (len(qs) - 1)))
        out.append({"doc": doc, "queries": len(qs), "mean_query_similarity": round(mean, 3),
                    "suspicious": mean < 0.35, "examples": qs[:5]})
    return sorted(out, key=lambda r: (not r["suspicious"], -r["queries"]))
