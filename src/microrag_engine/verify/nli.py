"""Cross-encoder models for verification (NLI) and reranking, loaded offline.

Backends behind one interface (``score_grid(chunks, claims)`` for NLI):
  * ``shipped``  - our fine-tuned MiniLM-L6 NLI model, int8 ONNX inside the package;
  * a folder     - any Hugging Face-format cross-encoder: ``model.onnx`` (onnxruntime)
                   or ``model.safetensors`` (BERT family, run by a small numpy
                   forward pass so torch is never needed); label order read from
                   ``config.json`` ``id2label``;
  * ``llm``      - LLM-as-judge over the OpenAI-compatible endpoint.

This module scores pairs; ``verify.py`` decides verdicts and applies the policy.
Nothing here downloads anything: a missing file is a ``ModelMissingError``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path

import numpy as np

from ..config import LLMConfig
from ..errors import ConfigError, ModelMissingError
from ..runtime.crossencoder import CrossEncoder, load_encoder, softmax
from ..runtime.llm import chat
from ..runtime.onnx import shipped_dir
from ..text import sentence_spans
from ..types import C, E, N

# The names models and judges use for the three outcomes -> our columns (types.VERDICTS).
_LABEL_NAMES = {"entailment": E, "entail": E, "entailed": E, "neutral": N, "not_entailment": N,
                "contradiction": C, "contradict": C, "contradicted": C}


_WORD = re.compile(r"[a-z0-9]+")
_STOP = frozenset("a an the of to in on for and or is are was were be been it this that with as by at from".split())


def _content(text: str) -> set[str]:
    return {w for w in _WORD.findall(text.lower()) if w not in _STOP}


def _norm(text: str) -> str:
    return " ".join(_WORD.findall(text.lower()))


def windows(text: str, size: int = 2) -> list[str]:
    """Runs of ``size`` consecutive sentences (stride 1): the premises the model sees.

    Short premises keep each pair near 60 tokens, which is what makes checking a
    whole answer fast on a CPU; two sentences still catch a claim that spans a
    sentence boundary.
    """
    sents = [text[s:e] for s, e in sentence_spans(text)] or [text]
    if len(sents) <= size:
        return [" ".join(sents)]
    return [" ".join(sents[i : i + size]) for i in range(len(sents) - size + 1)]


class NLIModel:
    """An NLI cross-encoder: pairs -> (entailment, neutral, contradiction) probabilities."""

    def __init__(self, encoder: CrossEncoder, min_entail: float | None = None,
                 min_contra: float | None = None, pairs_per_claim: int = 4) -> None:
        self.encoder = encoder
        id2label = encoder.config.get("id2label") or {}
        if not id2label:
            raise ConfigError(f"{encoder.folder}/config.json has no id2label: cannot tell which output is entailment")
        try:
            self.columns = [_LABEL_NAMES[str(id2label[str(i)] if str(i) in id2label else id2label[i]).lower()]
                            for i in range(len(id2label))]
        except KeyError:
            raise ConfigError(
                f"cannot read the label order from {encoder.folder}/config.json id2label "
                f"({sorted(map(str, id2label.values()))}); it must name entailment/neutral/contradiction"
            ) from None
        tuned = encoder.config.get("microrag", {})
        self.min_entail = tuned.get("min_entail", 0.5) if min_entail is None else min_entail
        self.min_contra = tuned.get("min_contra", 0.5) if min_contra is None else min_contra
        self.pairs_per_claim = pairs_per_claim

    def predict(self, pairs: Sequence[tuple[str, str]]) -> np.ndarray:
        """(n, 3) probabilities in E, N, C order for (premise, hypothesis) pairs."""
        if not pairs:
            return np.zeros((0, 3), dtype=np.float32)
        probs = softmax(self.encoder.logits(pairs))
        out = np.zeros((len(pairs), 3), dtype=np.float32)
        for j, col in enumerate(self.columns):
            out[:, col] += probs[:, j]  # a 2-way model leaves contradiction at 0
        return out

    def score_grid(self, chunks: Sequence[str], claims: Sequence[str]) -> list[list[tuple[float, float, float]]]:
        """[claim][chunk] -> (entail, neutral, contradict), maximised over each chunk's windows.

        Per claim only the ``pairs_per_claim`` windows sharing the most content
        words with it go to the model; a chunk none of whose windows made the
        cut scores (0, 1, 0). A claim found verbatim in a chunk is entailed
        without a model call.
        """
        flat = [(ci, w) for ci, c in enumerate(chunks) for w in windows(c)]
        # Per chunk and per window once, not once per claim.
        chunk_norms = [f" {_norm(c)} " for c in chunks]
        win_words = [_content(w) for _, w in flat]
        grid = [[(0.0, 1.0, 0.0) for _ in chunks] for _ in claims]
        pairs, where = [], []
        for k, claim in enumerate(claims):
            norm = _norm(claim)
            # Whole words only, and not for tiny claims: "No." is inside half of all chunks.
            copied = [ci for ci, cn in enumerate(chunk_norms) if len(norm.split()) >= 4 and f" {norm} " in cn]
            for ci in copied:
                grid[k][ci] = (1.0, 0.0, 0.0)
            if copied:
                continue
            words = _content(claim)
            ranked = sorted(range(len(flat)), key=lambda i: -len(words & win_words[i]))
            for i in ranked[: self.pairs_per_claim]:
                pairs.append((flat[i][1], claim))
                where.append((k, flat[i][0]))
        for (k, ci), p in zip(where, self.predict(pairs)):
            e, n, c = grid[k][ci]
            # Best support and worst conflict over the chunk's windows.
            grid[k][ci] = (max(e, float(p[E])), min(n, float(p[N])), max(c, float(p[C])))
        return grid


class LLMJudge:
    """LLM-as-judge: asks the chat model which chunk (if any) supports or contradicts each claim."""

    min_entail = 0.5
    min_contra = 0.5

    def __init__(self, llm) -> None:
        self.llm = llm

    def score_grid(self, chunks: Sequence[str], claims: Sequence[str]) -> list[list[tuple[float, float, float]]]:
        listing = "\n\n".join(f"[{i + 1}] {c}" for i, c in enumerate(chunks))
        grid = []
        for claim in claims:
            messages = [
                {"role": "system", "content": (
                    "You check claims against numbered passages. Reply with JSON only: "
                    '{"verdict": "entailment" | "neutral" | "contradiction", "passage": <number or null>}. '
                    "entailment: a passage states it; contradiction: a passage states otherwise; "
                    "neutral: no passage says it.")},
                {"role": "user", "content": f"Passages:\n{listing}\n\nClaim: {claim}"},
            ]
            text, _ = chat(self.llm, messages)
            row = [(0.0, 1.0, 0.0) for _ in chunks]
            verdict, idx = _parse_judgement(text, len(chunks))
            if verdict is not None and idx is not None:
                row[idx] = {E: (1.0, 0.0, 0.0), C: (0.0, 0.0, 1.0), N: (0.0, 1.0, 0.0)}[verdict]
            grid.append(row)
        return grid


def _parse_judgement(text: str, n: int) -> tuple[int | None, int | None]:
    """(label column, passage index) from the judge's reply; unparseable -> neutral."""
    # The outermost {...}: what a greedy r"\{.*\}" would match, without its quadratic
    # rescans of a reply full of unclosed braces.
    start, end = text.find("{"), text.rfind("}")
    try:
        obj = json.loads(text[start : end + 1]) if 0 <= start < end else {}
        label = _LABEL_NAMES.get(str(obj.get("verdict", "")).lower())
        idx = int(obj["passage"]) - 1 if obj.get("passage") is not None else None
    except (ValueError, TypeError, KeyError):
        return None, None
    return (label, idx) if idx is not None and 0 <= idx < n else (label, None)


@lru_cache(maxsize=4)
def load_nli(spec: str = "shipped"):
    """``shipped`` | ``llm`` | path to a model folder -> a backend with ``score_grid``."""
    if spec == "llm":
        llm = LLMConfig.from_env()
        if llm is None:
            raise ConfigError("--nli llm needs LLM_BASE_URL (an OpenAI-compatible endpoint)")
        return LLMJudge(llm)
    folder = shipped_dir("nli") if spec == "shipped" else Path(spec)
    if not folder.is_dir():
        raise ModelMissingError(f"NLI model folder {folder} does not exist")
    return NLIModel(load_encoder(folder))


