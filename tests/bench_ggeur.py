"""Benchmark (a script, not a test): batched GGEUR generation vs the per-sample loop of Algorithm 1.

    .venv/bin/python tests/bench_ggeur.py [--n-new 2000] [--dim 128] [--repeats 3]

Both produce the same samples from the same standard-normal draws (checked here); the script
prints the median seconds of each, side by side in one run, and their ratio.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import torch

from fedlib.geometry import augment, augment_loop, eigen_shape


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n-new", type=int, default=2000)
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--n-centers", type=int, default=50)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--loop-dims", choices=["vector", "scalar"], default="vector",
                    help="loop reference: one vector op per sample ('vector': beta = V (s*eps)) or Algorithm 1's inner sum over eigenvectors ('scalar')")
    a = ap.parse_args(argv)
    torch.set_num_threads(1)
    rng = np.random.default_rng(0)
    x = rng.normal(size=(a.dim, 4 * a.dim))
    vals, vecs = eigen_shape(torch.tensor(np.cov(x)))
    centers = torch.tensor(rng.normal(size=(a.n_centers, a.dim)))
    eps = torch.tensor(rng.normal(size=(a.n_new, a.dim)))

    def per_sample_vector():
        s = vals.sqrt()
        return torch.stack([centers[j % len(centers)] + vecs @ (s * eps[j]) for j in range(a.n_new)])

    loop = per_sample_vector if a.loop_dims == "vector" else (lambda: augment_loop(centers, vals, vecs, a.n_new, eps=eps))
    batched = lambda: augment(centers, vals, vecs, a.n_new, eps=eps)  # noqa: E731
    torch.testing.assert_close(batched(), loop(), atol=1e-10, rtol=0)
    tb, tl = [], []
    for _ in range(a.repeats):
        t0 = time.perf_counter(); batched(); tb.append(time.perf_counter() - t0)
        t0 = time.perf_counter(); loop(); tl.append(time.perf_counter() - t0)
    b, l = statistics.median(tb), statistics.median(tl)
    print(f"N={a.n_new} samples, d={a.dim}, {a.n_centers} centres, 1 thread, loop={a.loop_dims}")
    print(f"batched: {b * 1e3:.2f} ms   per-sample loop: {l * 1e3:.2f} ms   ratio loop/batched: {l / b:.1f}x")


if __name__ == "__main__":
    main()
