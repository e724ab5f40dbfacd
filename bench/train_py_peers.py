#!/usr/bin/env python3
"""bench/train_py_peers.py - the Python peers of bench/train.sh: the demo MLP (784-256-128-10,
ReLU, He init, standardised inputs, batch 256, SGD momentum 0.9, lr 0.1, 1 warmup epoch then
cosine to zero, shuffled every epoch) trained on Fashion-MNIST in fp32 with PyTorch (Debian's
python3-torch) and with numpy (its BLAS is Debian's OpenBLAS), on the same data files as
tpuflow (the dataset-fashion-mnist package). Prints one JSON line per peer:
{"peer", "accuracy", "seconds", "cpu_seconds", "epochs"}; "seconds" is the training loop's wall
time only (no data loading, no evaluation), "cpu_seconds" the process's CPU time (all threads)
in that loop. A peer whose module is missing is reported as skipped.

Usage: python3 bench/train_py_peers.py EPOCHS [torch|numpy ...]
Run it with OMP_WAIT_POLICY=PASSIVE and 2 threads (OMP_NUM_THREADS / OPENBLAS_NUM_THREADS),
as bench/train.sh does."""
import gzip
import json
import math
import os
import sys
import time

DATA = "/usr/share/datasets/fashion-mnist"
SIZES = [784, 256, 128, 10]
BATCH = 256


def idx(name, offset):
    with gzip.open(os.path.join(DATA, name), "rb") as f:
        return f.read()[offset:]


def load(np):
    xtr = np.frombuffer(idx("train-images-idx3-ubyte.gz", 16), np.uint8).reshape(-1, 784)
    ytr = np.frombuffer(idx("train-labels-idx1-ubyte.gz", 8), np.uint8).astype(np.int64)
    xte = np.frombuffer(idx("t10k-images-idx3-ubyte.gz", 16), np.uint8).reshape(-1, 784)
    yte = np.frombuffer(idx("t10k-labels-idx1-ubyte.gz", 8), np.uint8).astype(np.int64)
    mean, std = xtr.mean(dtype=np.float64), xtr.std(dtype=np.float64)
    norm = lambda x: ((x.astype(np.float32) - mean) / std).astype(np.float32)
    return norm(xtr), ytr, norm(xte), yte


def lr_at(step, spe, total):
    if step < spe:
        return 0.1 * (step + 1) / spe
    return 0.05 * (1 + math.cos(math.pi * (step - spe) / (total - spe)))


def run_numpy(epochs):
    import numpy as np

    xtr, ytr, xte, yte = load(np)
    rng = np.random.default_rng(7)
    W = [(rng.standard_normal((k, m)) * math.sqrt(2.0 / k)).astype(np.float32)
         for k, m in zip(SIZES, SIZES[1:])]
    b = [np.zeros(m, np.float32) for m in SIZES[1:]]
    vW = [np.zeros_like(w) for w in W]
    vb = [np.zeros_like(x) for x in b]
    n = len(xtr)
    spe = n // BATCH
    total = spe * epochs
    step = 0
    t0, c0 = time.monotonic(), time.process_time()
    for _ in range(epochs):
        perm = rng.permutation(n)
        for it in range(spe):
            ids = perm[it * BATCH:(it + 1) * BATCH]
            a = [xtr[ids]]
            for l in range(3):
                z = a[-1] @ W[l] + b[l]
                a.append(np.maximum(z, 0) if l < 2 else z)
            z = a[3] - a[3].max(axis=1, keepdims=True)
            p = np.exp(z)
            p /= p.sum(axis=1, keepdims=True)
            p[np.arange(BATCH), ytr[ids]] -= 1
            d = p / BATCH
            lr = lr_at(step, spe, total)
            for l in (2, 1, 0):
                gW = a[l].T @ d
                gb = d.sum(axis=0)
                if l:
                    d = (d @ W[l].T) * (a[l] > 0)
                vW[l] = 0.9 * vW[l] + gW
                vb[l] = 0.9 * vb[l] + gb
                W[l] -= np.float32(lr) * vW[l]
                b[l] -= np.float32(lr) * vb[l]
            step += 1
    secs, cpu = time.monotonic() - t0, time.process_time() - c0
    h = xte
    for l in range(3):
        h = h @ W[l] + b[l]
        if l < 2:
            h = np.maximum(h, 0)
    return float((h.argmax(axis=1) == yte).mean()), secs, cpu


def run_torch(epochs):
    import numpy as np
    import torch

    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "2")))
    torch.manual_seed(7)
    xtr, ytr, xte, yte = (torch.from_numpy(np.ascontiguousarray(a)) for a in load(np))
    layers = []
    for i, (k, m) in enumerate(zip(SIZES, SIZES[1:])):
        lin = torch.nn.Linear(k, m)
        torch.nn.init.kaiming_normal_(lin.weight, nonlinearity="relu")
        torch.nn.init.zeros_(lin.bias)
        layers += [lin] + ([torch.nn.ReLU()] if i < 2 else [])
    model = torch.nn.Sequential(*layers)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()
    n = len(xtr)
    spe = n // BATCH
    total = spe * epochs
    step = 0
    t0, c0 = time.monotonic(), time.process_time()
    for _ in range(epochs):
        perm = torch.randperm(n)
        for it in range(spe):
            ids = perm[it * BATCH:(it + 1) * BATCH]
            for g in opt.param_groups:
                g["lr"] = lr_at(step, spe, total)
            opt.zero_grad(set_to_none=True)
            loss_fn(model(xtr[ids]), ytr[ids]).backward()
            opt.step()
            step += 1
    secs, cpu = time.monotonic() - t0, time.process_time() - c0
    with torch.no_grad():
        acc = (model(xte).argmax(dim=1) == yte).float().mean().item()
    return acc, secs, cpu


def main():
    epochs = int(sys.argv[1]) if len(sys.argv) > 1 else 15
    for peer in sys.argv[2:] or ["torch", "numpy"]:
        try:
            acc, secs, cpu = {"torch": run_torch, "numpy": run_numpy}[peer](epochs)
        except ImportError as e:
            print(json.dumps({"peer": peer, "skipped": f"not installed ({e.name})"}))
            continue
        print(json.dumps({"peer": peer, "accuracy": acc, "seconds": round(secs, 3),
                          "cpu_seconds": round(cpu, 3), "epochs": epochs}))
        sys.stdout.flush()


if __name__ == "__main__":
    main()
