#!/usr/bin/env python3
"""An unmodified training script: it knows nothing about zeus-run.

It trains a two-layer MLP (numpy only) for ``--epochs`` epochs and prints a
Keras-style line after each one::

    Epoch 3/14 - 0.21s - loss: 0.5210 - accuracy: 0.8012 - val_loss: 0.5533 - val_accuracy: 0.7975

zeus-run reads ``val_accuracy`` from that line with a regex
(configs/keras-style-regex.yaml) and stops the script itself (SIGTERM) once the
target is reached or the cost threshold would be crossed; the script never
checks anything.

Run by hand:  python scripts/keras_style_train.py --batch-size 256 --lr 0.2 --epochs 14
"""

from __future__ import annotations

import argparse
import time

import numpy as np


def make_data(n_train: int = 60000, n_val: int = 4000, dim: int = 16, classes: int = 4):
    """Overlapping Gaussian clusters, two per class; fixed seed, same every run."""
    rng = np.random.default_rng(20231)
    centers = rng.normal(0, 1.0, size=(classes * 2, dim))
    comp = rng.integers(0, classes * 2, size=n_train + n_val)
    x = centers[comp] + rng.normal(0, 1.6, size=(len(comp), dim))
    y = comp % classes
    return x[:n_train], y[:n_train], x[n_train:], y[n_train:]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--batch-size", type=int, default=256)
    ap.add_argument("--lr", type=float, default=0.2)
    ap.add_argument("--epochs", type=int, default=14)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--hidden", type=int, default=32)
    args = ap.parse_args()

    xtr, ytr, xva, yva = make_data()
    rng = np.random.default_rng(args.seed)
    d, h, k = xtr.shape[1], args.hidden, int(ytr.max()) + 1
    w1, b1 = rng.normal(0, 1 / np.sqrt(d), (d, h)), np.zeros(h)
    w2, b2 = rng.normal(0, 1 / np.sqrt(h), (h, k)), np.zeros(k)
    onehot = np.eye(k)

    def forward(x):
        a = np.tanh(x @ w1 + b1)
        z = a @ w2 + b2
        p = np.exp(z - z.max(axis=1, keepdims=True))
        return a, p / p.sum(axis=1, keepdims=True)

    def metrics(x, y):
        _, p = forward(x)
        return float(-np.log(p[np.arange(len(y)), y] + 1e-12).mean()), float((p.argmax(axis=1) == y).mean())

    bs, lr = args.batch_size, args.lr
    for epoch in range(1, args.epochs + 1):
        t0 = time.perf_counter()
        order = rng.permutation(len(xtr))
        for start in range(0, len(xtr), bs):
            idx = order[start : start + bs]
            x, t = xtr[idx], onehot[ytr[idx]]
            a, p = forward(x)
            g = (p - t) / len(idx)
            ga = (g @ w2.T) * (1 - a * a)
            w2 -= lr * (a.T @ g)
            b2 -= lr * g.sum(axis=0)
            w1 -= lr * (x.T @ ga)
            b1 -= lr * ga.sum(axis=0)
        loss, acc = metrics(xtr[:4000], ytr[:4000])
        val_loss, val_acc = metrics(xva, yva)
        print(
            f"Epoch {epoch}/{args.epochs} - {time.perf_counter() - t0:.2f}s - loss: {loss:.4f} - accuracy: {acc:.4f} "
            f"- val_loss: {val_loss:.4f} - val_accuracy: {val_acc:.4f}",
            flush=True,
        )


if __name__ == "__main__":
    main()
