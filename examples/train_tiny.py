"""A tiny, real training run for the gated-training examples: numpy only, about a second.

Logistic regression on a seeded two-class dataset, so the same inputs always give the same model
(what provenance relies on). Three sub-commands, like a real pipeline's steps:

    python examples/train_tiny.py make-data --out data/tiny.npz
    python examples/train_tiny.py train --data data/tiny.npz --out out/model.npz \
        [--init weights/base.npz] [--log out/train.jsonl]
    python examples/train_tiny.py evaluate --data data/tiny.npz --model out/model.npz \
        --metrics out/metrics.json

Every file is written as ``*.incomplete`` and renamed, so a killed step leaves no half file.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import numpy as np


def _save_npz(path: Path, **arrays: np.ndarray) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    temp = path.with_name(path.name + ".incomplete")
    with open(temp, "wb") as handle:
        np.savez(handle, **arrays)
    os.replace(temp, path)


def _save_json(path: Path, data: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    temp = path.with_name(path.name + ".incomplete")
    temp.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    os.replace(temp, path)


def make_data(out: Path, samples: int, features: int, seed: int) -> None:
    """Two overlapping Gaussian blobs; a fixed seed makes the dataset byte-identical each time."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 2, size=samples)
    centres = np.where(y[:, None] == 1, 0.4, -0.4) * np.ones(features)
    x = centres + rng.normal(size=(samples, features))
    split = int(samples * 0.8)
    _save_npz(out, x_train=x[:split], y_train=y[:split], x_eval=x[split:], y_eval=y[split:])


def _sigmoid(z: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-np.clip(z, -30, 30)))


def _loss(w: np.ndarray, b: float, x: np.ndarray, y: np.ndarray) -> float:
    p = np.clip(_sigmoid(x @ w + b), 1e-9, 1 - 1e-9)
    return float(-np.mean(y * np.log(p) + (1 - y) * np.log(1 - p)))


def train(
    data: Path, out: Path, init: Path | None, log: Path | None, epochs: int, lr: float
) -> None:
    d = np.load(data)
    x, y = d["x_train"], d["y_train"]
    if init is not None and init.is_file():
        base = np.load(init)
        w, b = base["w"].astype(float), float(base["b"])
    else:
        w, b = np.zeros(x.shape[1]), 0.0
    lines = []
    for epoch in range(1, epochs + 1):
        p = _sigmoid(x @ w + b)
        w -= lr * (x.T @ (p - y)) / len(y)
        b -= lr * float(np.mean(p - y))
        lines.append(json.dumps({"epoch": epoch, "train": {"loss": _loss(w, b, x, y)}}))
    _save_npz(out, w=w, b=np.array(b))
    if log is not None:
        log.parent.mkdir(parents=True, exist_ok=True)
        log.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(f"trained {epochs} epochs: train loss {json.loads(lines[-1])['train']['loss']:.4f}")


def evaluate(data: Path, model: Path, metrics: Path) -> None:
    d, m = np.load(data), np.load(model)
    w, b = m["w"], float(m["b"])
    x, y = d["x_eval"], d["y_eval"]
    pred = (_sigmoid(x @ w + b) >= 0.5).astype(int)
    tp = int(np.sum((pred == 1) & (y == 1)))
    precision = tp / max(1, int(np.sum(pred == 1)))
    recall = tp / max(1, int(np.sum(y == 1)))
    result = {
        "eval": {
            "accuracy": float(np.mean(pred == y)),
            "loss": _loss(w, b, x, y),
            "precision": precision,
            "recall": recall,
        },
        "samples": len(y),
    }
    _save_json(metrics, result)
    print(json.dumps(result["eval"], sort_keys=True))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("make-data", help="write the seeded dataset")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--samples", type=int, default=2000)
    p.add_argument("--features", type=int, default=8)
    p.add_argument("--seed", type=int, default=7)
    p = sub.add_parser("train", help="fit the model")
    p.add_argument("--data", type=Path, required=True)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--init", type=Path, help="base weights to start from, when present")
    p.add_argument("--log", type=Path, help="JSONL log, one line per epoch")
    p.add_argument("--epochs", type=int, default=200)
    p.add_argument("--lr", type=float, default=0.5)
    p = sub.add_parser("evaluate", help="score the model on the held-out split")
    p.add_argument("--data", type=Path, required=True)
    p.add_argument("--model", type=Path, required=True)
    p.add_argument("--metrics", type=Path, required=True)
    args = parser.parse_args(argv)
    try:
        if args.cmd == "make-data":
            make_data(args.out, args.samples, args.features, args.seed)
        elif args.cmd == "train":
            train(args.data, args.out, args.init, args.log, args.epochs, args.lr)
        else:
            evaluate(args.data, args.model, args.metrics)
    except (OSError, KeyError, ValueError) as exc:
        print(f"error: {args.cmd}: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
