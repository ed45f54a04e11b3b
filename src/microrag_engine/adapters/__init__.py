"""Framework adapters: a LangChain and a LlamaIndex retriever over a local index or a remote server.

``adapters.langchain`` (extra ``langchain``) and ``adapters.llamaindex`` (extra ``llamaindex``)
import their framework and are imported only by the user who installed it; this package
imports neither, so the core imports without the extras. ``adapters.search`` is the
framework-free part both share. Nothing else in microRAG imports this package (the top layer).
"""
