"""The HTTP server: the same five steps behind identity, provenance, labels and an audit trail.

  auth.py   API keys (stored hashed) -> principals with a role and clearance labels
  state.py  server-side records: review queue (quarantine) and the audit trail
  tools.py  the file-read tool and the rules that decide whether a call may run
  app.py    FastAPI routes; ``create_app(ServerConfig)``
Needs the ``server`` extra (fastapi, uvicorn).
"""
