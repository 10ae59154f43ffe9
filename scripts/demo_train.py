#!/usr/bin/env python3
"""A real (small) training job for the zeus-run demo: a two-layer MLP in numpy.

It trains by minibatch SGD on a classification problem it generates
deterministically, and reports validation accuracy after each epoch through
`zeus_run.train`. Batch size matters for real: small batches need fewer epochs
but each epoch runs many slow Python steps; large batches run fast epochs but
need many of them, and the largest may never reach the target.

After its loop it saves the model (``model.npz`` in ``$ZEUS_LOG_DIR``, the
trial's directory): zeus-run lets a script finish after the target, so the
save is never cut short (see the README, "Stopping a trial").

Run by hand:  python scripts/demo_train.py --batch-size 1024 --lr 0.4
"""

from __future__ import annotations

import argparse
import os

import numpy as np

from zeus_run.train import Trial


def make_data(n_train: int = 60000, n_val: int = 4000, dim: int = 16, classes: int = 4):
    """Overlapping Gaussian clusters with a non-linear twist; fixed seed, same every run."""
    rng = np.random.default_rng(20231)
    centers = rng.normal(0, 1.0, size=(classes * 2, dim))
    n = n_train + n_val
    comp = rng.integers(0, classes * 2, size=n)
    x = centers[comp] + rng.normal(0, 1.6, size=(n, dim))
    y = comp % classes  # two clusters per class: not linearly separable
    return x[:n_train], y[:n_train], x[n_train:], y[n_train:]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--batch-size", type=int, default=None)
    ap.add_argument("--lr", type=float, default=None)
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--epochs", type=int, default=None)
    ap.add_argument("--hidden", type=int, default=32)
    ap.add_argument("--save", default=None, help="where to save the model (default: $ZEUS_LOG_DIR/model.npz)")
    args = ap.parse_args()

    trial = Trial.from_env(batch_size=1024, learning_rate=0.4, seed=0, max_epochs=14, target_metric=0.815)
    bs = args.batch_size or trial.batch_size
    lr = args.lr or trial.learning_rate or 0.4
    seed = trial.seed if args.seed is None else args.seed
    if args.epochs:
        trial.max_epochs = args.epochs

    xtr, ytr, xva, yva = make_data()
    rng = np.random.default_rng(seed)
    d, h, k = xtr.shape[1], args.hidden, int(ytr.max()) + 1
    w1 = rng.normal(0, 1 / np.sqrt(d), (d, h))
    b1 = np.zeros(h)
    w2 = rng.normal(0, 1 / np.sqrt(h), (h, k))
    b2 = np.zeros(k)
    onehot = np.eye(k)[ytr]

    for epoch in trial.epochs():
        order = rng.permutation(len(xtr))
        trial.set_iters_per_epoch(-(-len(xtr) // bs))  # lets zeus-run fit GPU power-limit profiling in an epoch
        for start in range(0, len(xtr), bs):
            trial.step()  # one iteration (a counter increment unless zeus-run is profiling)
            idx = order[start : start + bs]
            x, t = xtr[idx], onehot[idx]
            a = np.tanh(x @ w1 + b1)
            z = a @ w2 + b2
            p = np.exp(z - z.max(axis=1, keepdims=True))
            p /= p.sum(axis=1, keepdims=True)
            g = (p - t) / len(idx)
            ga = (g @ w2.T) * (1 - a * a)
            w2 -= lr * (a.T @ g)
            b2 -= lr * g.sum(axis=0)
            w1 -= lr * (x.T @ ga)
            b1 -= lr * ga.sum(axis=0)
        acc = float(((np.tanh(xva @ w1 + b1) @ w2 + b2).argmax(axis=1) == yva).mean())
        print(f"epoch {epoch:3d} bs={bs} val_acc={acc:.4f}", flush=True)
        trial.report(acc)
    trial.close()
    save = args.save or (
        os.path.join(os.environ["ZEUS_LOG_DIR"], "model.npz") if os.environ.get("ZEUS_LOG_DIR") else None
    )
    if save and trial.reached:  # a trial stopped early has no model worth keeping
        tmp = save + ".tmp.npz"
        np.savez(tmp, w1=w1, b1=b1, w2=w2, b2=b2)
        os.replace(tmp, save)
        print(f"model saved to {save}", flush=True)


if __name__ == "__main__":
    main()
