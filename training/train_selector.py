"""Fine-tune all-MiniLM-L6-v2 as the answer cross-encoder: which candidate passage answers the question.

    .venv/bin/python training/mine_qa.py && .venv/bin/python training/data_select.py
    .venv/bin/python training/nli_weights.py        # the encoder starts from the shipped NLI model
    OMP_WAIT_POLICY=PASSIVE .venv/bin/python training/train_selector.py --out build/select-nli \
        --max-length 128 --init build/nli-torch     # ~25 min on 2 cores, then ~3 min of calibration

One logit per (question, passage) pair. The loss reads a question's candidates together:
a softmax over them that puts the mass on its positives (which passage answers, as the
answerer must choose) plus a per-pair binary term (whether this one answers at all: a
question whose candidates hold no answer must score them all low, so that the answerer can
refuse on it). Fixed seed; the encoder's word-embedding table is frozen, as for the NLI
model. After each epoch it scores the validation groups (git's QA set: never trained on)
by top-1 among the answerer's first ``--top`` candidates, next to the linear selector's
top-1, and blends ``linear + w * cross`` to choose ``w``. Exports fp32 ONNX (weights stored
fp16) with ``blend`` and ``top`` in its config.json to ``<out>/onnx``, then calibrates the
refusal floor ``min_answers`` on the QA dev sets (``calibrate``; ``--calibrate-only`` redoes
just that). Use it with ``override(settings, answer_model="<out>/onnx")``; it does not ship
(training/ANSWER_MODEL.md says why).
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
import time
from pathlib import Path

import numpy as np
import torch
from transformers import AutoModelForSequenceClassification, get_linear_schedule_with_warmup

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from train_nli import base_dir, collate, export_onnx, make_tokenizer  # noqa: E402

ROOT = HERE.parent
DATA = ROOT / "build" / "select"
BLENDS = (0.0, 0.25, 0.5, 1.0, 2.0, 4.0, 1e6)  # 1e6: the cross-encoder alone
MAX_ADDED_FALSE = 0.02  # the floor may refuse at most this share of any dev set's answerable questions
FLOORS = (0.0, 0.01, 0.02, 0.03, 0.05, 0.07, 0.1, 0.15, 0.2, 0.3, 0.4)


def calibrate(folder: Path) -> dict:
    """The model's ``min_answers`` floor, chosen on the QA dev sets at the shipped defaults with
    the model on: per set, its probability for each question the answerer would otherwise
    answer. Of the floors that refuse at most ``MAX_ADDED_FALSE`` of every set's answerable
    questions (the answers issue allows 5% false refusals in all), the one that refuses the
    most unanswerable ones, a false refusal costing two missed ones (mean over the sets; the
    lower floor on a tie, so 0 when none gains)."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import qa_report

    from microrag_engine import override, preset
    from microrag_engine.eval.qa import load_qa
    from microrag_engine.generate import UnknownNames, judge, load_answer_model, read_scores, score_units, unknown_names

    s = override(preset("default"), answer_model=str(folder))
    reader = load_answer_model(folder)
    sets = [n for n, role in qa_report.SETS.items() if role == "dev" and n != "python-docs"]  # python-docs: 20 min
    per_set = {}
    for name, engine, _, _ in qa_report.engines(sets, s):
        probs, answerable = [], []
        for item in load_qa(qa_report.QA / f"{name}.jsonl"):
            r = engine.with_context(engine.retrieve(item.question))
            if r.refused or not r.hits:
                continue
            sc = score_units(item.question, r, engine.index.embedder, r.weight, True)
            unknown = unknown_names(item.question, r.known) if r.known is not None else UnknownNames()
            if not sc.spans or not judge(sc.rel, s.answer_min_support, s.answer_max_missing, s.answer_rescue_sem,
                                         unknown=unknown).answerable:
                continue
            probs.append(read_scores(item.question, sc, reader, s.answer_rerank).answers)
            answerable.append(bool(item.answerable))
        per_set[name] = (np.array(probs), np.array(answerable))

    def rates(floor: float) -> dict[str, tuple[float, float]]:
        return {n: (float((p[~a] < floor).sum() / max(1, (~a).sum())), float((p[a] < floor).mean()))
                for n, (p, a) in per_set.items()}

    def utility(floor: float) -> float:
        return float(np.mean([ref - 2.0 * false for ref, false in rates(floor).values()]))

    feasible = [f for f in FLOORS if all(false <= MAX_ADDED_FALSE for _, false in rates(f).values())]
    best = max(feasible, key=lambda f: (round(utility(f), 6), -f))
    return {"min_answers": best,
            "calibrated_on": {n: f"{int(a.sum())} answerable + {int((~a).sum())} unanswerable questions the answerer "
                                 "would otherwise answer" for n, (_, a) in per_set.items()},
            "sweep (unanswerable refused, answerable refused)": {
                f"{f:g}": {n: [round(r, 3), round(x, 3)] for n, (r, x) in rates(f).items()} for f in FLOORS}}


def write_calibration(folder: Path) -> None:
    cfg = json.loads((folder / "config.json").read_text())
    groups = [json.loads(x) for x in (DATA / "train.jsonl").read_text(encoding="utf-8").splitlines()]
    cfg["trained_on"] = {}
    for g in groups:  # questions per source (training/data_select.py)
        cfg["trained_on"][g["source"]] = cfg["trained_on"].get(g["source"], 0) + 1
    cfg["microrag"] = calibrate(folder)
    (folder / "config.json").write_text(json.dumps(cfg, indent=1) + "\n")
    print(json.dumps(cfg["microrag"]["min_answers"]), flush=True)


def candidates(group: dict, top: int, negatives: int, rng: random.Random) -> tuple[list[str], list[bool]]:
    """What the model sees of a group: the answerer's first ``top`` (as it will rerank them), or
    a mined question's answer and ``negatives`` of its page's other answers."""
    if "linear" in group:
        order = np.argsort(-np.array(group["linear"]), kind="stable")[:top]
        return [group["passages"][i] for i in order], [group["labels"][i] for i in order]
    negs = rng.sample(group["passages"][1:], min(negatives, len(group["passages"]) - 1))
    return [group["passages"][0], *negs], [True] + [False] * len(negs)


def group_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    point = torch.nn.functional.binary_cross_entropy_with_logits(logits, labels.float())
    if not labels.any():
        return point
    listwise = torch.logsumexp(logits, 0) - torch.logsumexp(logits[labels], 0)
    return listwise + point


@torch.no_grad()
def scores(model, tok, groups: list[dict], top: int) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Per validation group: the linear scores, cross logits and labels of its first ``top``."""
    model.eval()
    out = []
    for g in groups:
        order = np.argsort(-np.array(g["linear"]), kind="stable")[:top]
        encs = tok.encode_batch([(g["question"], g["passages"][i]) for i in order])
        logits = model(**{k: v for k, v in collate(encs, [0] * len(encs)).items() if k != "labels"}).logits[:, 0]
        lin = np.array(g["linear"])[order]
        out.append((np.log(lin + 1e-9), logits.numpy(), np.array(g["labels"])[order]))
    model.train()
    return out


def validate(rows: list[tuple[np.ndarray, np.ndarray, np.ndarray]]) -> dict[str, float]:
    """Top-1 of each blend over the groups that hold a positive (the blend is chosen on these
    same questions: its figure is in-sample for the blend, out-of-sample for the weights)."""
    pos = [r for r in rows if r[2].any()]
    res = {f"top1 blend {w:g}": float(np.mean([y[int(np.argmax(lin + w * x if w < 1e6 else x))] for lin, x, y in pos]))
           for w in BLENDS}
    res["groups with a positive"] = len(pos)
    return res


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--groups", type=int, default=4, help="questions per step")
    ap.add_argument("--lr", type=float, default=3e-5)
    ap.add_argument("--max-length", type=int, default=160)
    ap.add_argument("--top", type=int, default=6, help="answerer candidates reranked")
    ap.add_argument("--negatives", type=int, default=3, help="per mined question")
    ap.add_argument("--answerer-repeat", type=int, default=3, help="answerer groups count this many times per epoch")
    ap.add_argument("--seed", type=int, default=13)
    ap.add_argument("--limit", type=int, default=0, help="use only N groups (smoke runs)")
    ap.add_argument("--calibrate-only", action="store_true", help="redo the refusal floor of <out>/onnx and stop")
    ap.add_argument("--init", type=Path, default=None,
                    help="start from this checkpoint's encoder (build/nli-torch: training/nli_weights.py)")
    args = ap.parse_args(argv)

    if args.calibrate_only:
        write_calibration(args.out / "onnx")
        return
    torch.manual_seed(args.seed)
    torch.set_num_threads(2)
    rng = random.Random(args.seed)
    train = [json.loads(x) for x in (DATA / "train.jsonl").read_text(encoding="utf-8").splitlines()]
    val = [json.loads(x) for p in sorted(DATA.glob("val-*.jsonl")) for x in p.read_text(encoding="utf-8").splitlines()]
    train = [g for g in train for _ in range(args.answerer_repeat if "linear" in g else 1)]
    if args.limit:
        rng.shuffle(train)
        train, val = train[: args.limit], val[: max(8, args.limit // 10)]
    tok = make_tokenizer(args.max_length)
    model = AutoModelForSequenceClassification.from_pretrained(args.init or base_dir(), num_labels=1,
                                                               ignore_mismatched_sizes=bool(args.init))
    model.bert.embeddings.word_embeddings.weight.requires_grad_(False)
    steps = math.ceil(len(train) / args.groups) * args.epochs
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=args.lr, weight_decay=0.01)
    sched = get_linear_schedule_with_warmup(opt, int(0.06 * steps), steps)
    print(f"{len(train)} groups, {len(val)} validation groups, {steps} steps", flush=True)
    report = {"linear top1": validate([(lin, lin, y) for lin, _, y in scores(model, tok, val, args.top)])["top1 blend 0"]}
    print(report, flush=True)
    step, t0, loss_sum, pairs = 0, time.time(), 0.0, 0
    model.train()
    for epoch in range(1, args.epochs + 1):
        rng.shuffle(train)
        for i in range(0, len(train), args.groups):
            chosen = [candidates(g, args.top, args.negatives, rng) for g in train[i : i + args.groups]]
            encs = tok.encode_batch([(g["question"], p) for g, (ps, _) in zip(train[i : i + args.groups], chosen) for p in ps])
            batch = collate(encs, [0] * len(encs))
            batch.pop("labels")
            logits = model(**batch).logits[:, 0]
            loss, at = torch.zeros(()), 0
            for ps, ys in chosen:
                loss = loss + group_loss(logits[at : at + len(ps)], torch.tensor(ys))
                at += len(ps)
            (loss / len(chosen)).backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            sched.step()
            opt.zero_grad()
            step, pairs, loss_sum = step + 1, pairs + len(encs), loss_sum + loss.item() / len(chosen)
            if step % 50 == 0:
                print(f"step {step}/{steps} epoch {epoch} loss {loss_sum / 50:.4f} {pairs / (time.time() - t0):.1f} pairs/s",
                      flush=True)
                loss_sum = 0.0
        model.save_pretrained(args.out / f"ckpt-epoch{epoch}")
        report[f"epoch {epoch}"] = validate(scores(model, tok, val, args.top))
        print(epoch, report[f"epoch {epoch}"], flush=True)
    best = max((w for w in BLENDS), key=lambda w: report[f"epoch {args.epochs}"][f"top1 blend {w:g}"])
    export_onnx(model, base_dir() / "tokenizer.json", args.out / "onnx", {0: "answers"}, args.max_length)
    cfg = json.loads((args.out / "onnx" / "config.json").read_text())
    cfg |= {"blend": best, "top": args.top, "validation": report, "command": "python training/train_selector.py"}
    (args.out / "onnx" / "config.json").write_text(json.dumps(cfg, indent=1) + "\n")
    write_calibration(args.out / "onnx")
    print(f"done in {(time.time() - t0) / 60:.1f} min; blend {best}", flush=True)


if __name__ == "__main__":
    main()
