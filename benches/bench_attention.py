"""Attention as a temporal local mean: ours against NumPy's unfused softmax(QKᵀ)V and PyTorch.

    python benches/bench_attention.py            # causal f32, 8 heads, T = 4,096, d = 64; backward; memory at T = 65,536
    python benches/bench_attention.py --full     # also T = 16,384 (8 heads) and f64
    python benches/bench_attention.py --no-memory

Every line times ours and the peer on the same arrays in the same run and prints the ratio
peer / ours (> 1: ours faster). The forward against NumPy alternates the two, run for run, and
takes the best of k of each: a burst of load on the shared machine then hits both sides. Both use
every core (NumPy's BLAS, named in the output, has as many threads as ours); a second line
compares the CPU time of one thread each (`threadpoolctl` limits both), which the machine's load
disturbs much less. PyTorch is optional: its lines are skipped without it.
The memory case runs in a fresh process: it resets the kernel's peak-RSS mark once the inputs
exist (Linux /proc/self/clear_refs) and reports the peak above them, minus the outputs.
"""

import argparse
import subprocess
import sys

import time

import numpy as np
from _common import best_time, report
from threadpoolctl import threadpool_info, threadpool_limits

from localization import _core, attention, attention_backward


def numpy_attention(Q, K, V, causal):
    """The textbook softmax(QKᵀ/√d + mask)V with the T×T matrices NumPy needs."""
    S = Q @ np.swapaxes(K, -1, -2)
    S *= Q.dtype.type(1 / np.sqrt(Q.shape[-1]))
    if causal:
        T = Q.shape[-2]
        S += np.triu(np.full((T, T), -np.inf, dtype=Q.dtype), 1)
    S -= S.max(-1, keepdims=True)
    np.exp(S, out=S)
    S /= S.sum(-1, keepdims=True)
    return S @ V


def alternating(fns, repeat, clock=time.perf_counter):
    """Best time of each of `fns` over `repeat` rounds that run each once, in turn; and their outputs."""
    best, outs = [float("inf")] * len(fns), [None] * len(fns)
    for _ in range(repeat):
        for i, fn in enumerate(fns):
            t = clock()
            outs[i] = fn()
            best[i] = min(best[i], clock() - t)
    return best, outs


def blas():
    """The BLAS behind NumPy's matrix products and its threads."""
    return ", ".join(f"{i['internal_api']} {i.get('version', '')} {i.get('architecture', '')} {i['num_threads']} threads"
                     for i in threadpool_info() if i["user_api"] == "blas")


def try_torch():
    try:
        import torch

        return torch
    except Exception:
        return None


def forward_case(H, T, d, dtype, repeat):
    rng = np.random.default_rng(0)
    Q, K, V = (rng.standard_normal((1, H, T, d), dtype=np.float64).astype(dtype) for _ in range(3))
    name = f"causal fwd {np.dtype(dtype).name} H={H} T={T:,} d={d}"
    (ours, peer), (out, ref) = alternating([lambda: attention(Q, K, V, mask="causal"), lambda: numpy_attention(Q, K, V, True)], repeat)
    report(name, ours, peer, "NumPy unfused")
    print(f"{'':<46} ours {_core.effective_n_jobs()} threads, NumPy: {blas()}; max |ours − NumPy| = {np.max(np.abs(out - ref)):.1e}")
    with threadpool_limits(1):
        (c_ours, c_peer), _ = alternating([lambda: attention(Q, K, V, mask="causal", n_jobs=1), lambda: numpy_attention(Q, K, V, True)],
                                          max(2, repeat // 2), time.process_time)
    report(f"  (CPU time, one thread each)", c_ours, c_peer, "NumPy unfused")
    torch = try_torch()
    if torch is not None:
        tq, tk, tv = (torch.from_numpy(A) for A in (Q, K, V))
        with torch.no_grad():
            t_time, tout = best_time(lambda: torch.nn.functional.scaled_dot_product_attention(tq, tk, tv, is_causal=True), repeat)
        report(name, ours, t_time, f"torch {torch.__version__.split('+')[0]} SDPA ({torch.get_num_threads()} threads)")
        print(f"{'':<46} max |ours − torch| = {np.max(np.abs(out - tout.numpy())):.1e}")
    return ours


def backward_case(H, T, d, dtype, repeat, forward_time):
    rng = np.random.default_rng(1)
    Q, K, V, G = (rng.standard_normal((1, H, T, d), dtype=np.float64).astype(dtype) for _ in range(4))
    out, lse = attention(Q, K, V, mask="causal", return_lse=True)
    ours, _ = best_time(lambda: attention_backward(G, Q, K, V, out, lse, mask="causal"), repeat)
    name = f"causal bwd {np.dtype(dtype).name} H={H} T={T:,} d={d}"
    print(f"{name:<46} ours {ours:9.4f} s   = {ours / forward_time:4.2f}× our forward (target ≤ 3×)")
    torch = try_torch()
    if torch is not None:
        tq, tk, tv = (torch.from_numpy(A).requires_grad_() for A in (Q, K, V))
        tg = torch.from_numpy(G)

        def fwd_bwd():
            for t in (tq, tk, tv):
                t.grad = None
            o = torch.nn.functional.scaled_dot_product_attention(tq, tk, tv, is_causal=True)
            o.backward(tg)

        t_time, _ = best_time(fwd_bwd, repeat)
        fb, _ = best_time(lambda: (attention_backward(G, Q, K, V, *attention(Q, K, V, mask="causal", return_lse=True), mask="causal")), repeat)
        report(f"causal fwd+bwd {np.dtype(dtype).name} H={H} T={T:,}", fb, t_time, "torch SDPA autograd")


MEMORY = r"""
import time, numpy as np
from localization import attention, attention_backward

def status(key):
    with open("/proc/self/status") as f:
        return next(int(l.split()[1]) for l in f if l.startswith(key)) / 1024

T, d, dt = {T}, 64, np.{dtype}
rng = np.random.default_rng(0)
Q, K, V, G = (rng.standard_normal((T, d), dtype=dt) for _ in range(4))
with open("/proc/self/clear_refs", "w") as f:  # reset the peak (VmHWM) to the current RSS
    f.write("5")
base = status("VmRSS:")
t0 = time.perf_counter()
out, lse = attention(Q, K, V, mask="causal", return_lse=True)
t1 = time.perf_counter()
g = attention_backward(G, Q, K, V, out, lse, mask="causal")
t2 = time.perf_counter()
peak = status("VmHWM:") - base
outputs = (out.nbytes + lse.nbytes + g.dQ.nbytes + g.dK.nbytes + g.dV.nbytes) / 2**20
inputs = 4 * Q.nbytes / 2**20
print(f"T={{T:,}} one head d=64 {{dt.__name__}}: forward {{t1 - t0:.1f}} s, backward {{t2 - t1:.1f}} s "
      f"({{(t2 - t1) / (t1 - t0):.2f}}x); peak RSS {{peak:.1f}} MB above the inputs ({{inputs:.0f}} MB), of which outputs "
      f"{{outputs:.1f}} MB: {{peak - outputs:.1f}} MB working memory (target < 100 MB; one T×T matrix would be "
      f"{{T * T * np.dtype(dt).itemsize / 2**30:.0f}} GB)")
"""


def memory_case(T, dtype):
    res = subprocess.run([sys.executable, "-c", MEMORY.format(T=T, dtype=dtype)], capture_output=True, text=True)
    print(res.stdout.strip() or res.stderr[-2000:])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--full", action="store_true")
    ap.add_argument("--no-memory", action="store_true")
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    fwd = forward_case(8, 4096, 64, np.float32, args.repeat)
    backward_case(8, 4096, 64, np.float32, args.repeat, fwd)
    if args.full:
        fwd64 = forward_case(8, 4096, 64, np.float64, 3)
        backward_case(8, 4096, 64, np.float64, 3, fwd64)
        forward_case(8, 16384, 64, np.float32, 2)
    if not args.no_memory:
        memory_case(65536, "float32")
        if args.full:
            memory_case(65536, "float64")


if __name__ == "__main__":
    main()
