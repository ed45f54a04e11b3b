"""Front end: ``microrag eval`` - retrieval quality on BEIR-format and QA sets (pytrec_eval)."""
