"""Model runtimes (onnxruntime, numpy BERT, cross-encoders, the OpenAI-compatible client).

They load weights and run them; they know nothing of the pipeline's steps.
"""
