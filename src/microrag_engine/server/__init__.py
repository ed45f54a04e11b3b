"""The HTTP server: the same engine behind identity, provenance, labels and an audit trail.

  app.py       create_app(ServerConfig): errors, limits (body cap, Host allowlist), the routes
  config.py    ServerConfig, hardened by default
  context.py   what routes share: the current engine, the write lock, who the caller is
  routes/      query.py, documents.py, oversight.py: thin routes over ``Engine``
  defences.py  every defence a named switch; the two profiles, HARDENED and LAB (all off)
  auth.py      API keys (stored hashed) -> principals with a role and clearance labels
  state.py     server-side records: review queue (quarantine) and the audit trail
Needs the ``server`` extra (fastapi, uvicorn).
"""
