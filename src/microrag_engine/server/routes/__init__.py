"""The server's routes, one module per concern; each builds an ``APIRouter`` over a ``ServerContext``.

  query.py      POST /query: retrieve for the caller's clearance, answer through the engine,
                guard every channel, audit before anything leaves
  documents.py  /documents, /ingest, /review, /reset: what enters the index and who owns it
  oversight.py  the page, /whoami, /health, /audit, /audit/collisions
"""
