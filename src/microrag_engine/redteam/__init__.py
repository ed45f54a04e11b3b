"""Red-team instruments: a maximally compliant model and the canonical RAG attacks.

  compliant.py  an OpenAI-compatible server that quotes its context and obeys everything
  attacks.py    each attack with a canary-based success predicate; ``run_all(target, keys)``
These are test instruments: point them only at servers you run.
"""
