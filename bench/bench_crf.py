"""Benchmark: textebm's linear-chain CRF (losses/crf.py) against pytorch-crf, in one run.

    PYTHONPATH=src .venv/bin/python bench/bench_crf.py [--batch 64] [--length 40] [--tags 12]
        [--repeats 30] [--threads 1]

Random node potentials (B, T, K) and a random transition matrix, sentence lengths drawn from
[T/2, T] with one sentence of length T (right-padded, as a tagger's batches are). pytorch-crf
(`pip install pytorch-crf`, a dev dependency) has start and end transitions; paper e's CRF
(eq. 6) has none, so they are set to zero there, which makes the two the same model.

Checked first, in float64: the log-likelihoods agree to 1e-5 and the Viterbi paths are the
same; then the same in fp32 (the paths must still be identical; the largest log-likelihood
difference is printed). Timed in fp32, each as the best of `--repeats` runs, the two
implementations interleaved (the machine may be shared: timings are noisy, ratios in one run are
what to read):

- log-likelihood, forward only;
- log-likelihood, forward and backward (a training step's CRF part);
- Viterbi decoding (pytorch-crf backtracks each sentence in a Python loop; textebm gathers the
  whole batch at each position).

Printed: milliseconds per call and the speed ratio pytorch-crf / textebm of each.
"""

from __future__ import annotations

import argparse
import platform
import time
from pathlib import Path

import torch


def _time(fn, repeats: int) -> float:
    """Best wall-clock seconds of `repeats` calls (after one warm-up call)."""
    fn()
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--length", type=int, default=40)
    ap.add_argument("--tags", type=int, default=12)
    ap.add_argument("--repeats", type=int, default=30)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    from torchcrf import CRF

    from textebm.losses.crf import crf_nll, viterbi
    from textebm.precision import BF16_FLAGS, cpu_capability, cpu_flags

    torch.set_num_threads(args.threads)
    g = torch.Generator().manual_seed(args.seed)
    B, T, K = args.batch, args.length, args.tags
    lengths = torch.randint(T // 2, T + 1, (B,), generator=g)
    lengths[0] = T
    mask = torch.arange(T)[None] < lengths[:, None]  # (B, T)
    phi64 = torch.randn(B, T, K, generator=g, dtype=torch.float64) * 3
    A64 = torch.randn(K, K, generator=g, dtype=torch.float64)
    tags = torch.randint(0, K, (B, T), generator=g).masked_fill(~mask, 0)

    ref = CRF(K, batch_first=True)
    with torch.no_grad():
        ref.start_transitions.zero_()
        ref.end_transitions.zero_()

    def theirs_ll(phi, A):
        ref.transitions.data = A
        return ref(phi, tags, mask, reduction="none")  # (B,)

    def theirs_decode(phi, A):
        ref.transitions.data = A
        return ref.decode(phi, mask)  # list of B lists

    def ours_ll(phi, A):
        return -crf_nll(phi, A, tags, mask, reduction="none")  # (B,)

    def ours_decode(phi, A):
        return viterbi(phi, A, mask)[0]  # (B, T), -1 at padding

    def same_paths(ours, theirs) -> bool:
        return all(ours[b, :n].tolist() == theirs[b] for b, n in enumerate(lengths.tolist()))

    bf16 = "/".join(sorted(cpu_flags() & set(BF16_FLAGS))) or "no native bf16"
    info = Path("/proc/cpuinfo").read_text().splitlines() if Path("/proc/cpuinfo").is_file() else []
    name = next((ln.split(":", 1)[1].strip() for ln in info if ln.startswith("model name")), platform.machine())
    print(f"CPU: {name}, capability {cpu_capability()}, {bf16}; precision fp32 (timings), "
          f"torch {torch.__version__}, "
          f"{torch.get_num_threads()} thread(s); batch {B} x {T} tokens (lengths {T // 2}..{T}) x {K} tags")
    ref64 = ref.double()
    with torch.no_grad():
        d64 = (ours_ll(phi64, A64) - theirs_ll(phi64, A64)).abs().max().item()
        paths64 = same_paths(ours_decode(phi64, A64), theirs_decode(phi64, A64))
    ref = ref64.float()
    phi, A = phi64.float(), A64.float()
    with torch.no_grad():
        d32 = (ours_ll(phi, A) - theirs_ll(phi, A)).abs().max().item()
        paths32 = same_paths(ours_decode(phi, A), theirs_decode(phi, A))
    print(f"agreement: float64 log-likelihood max |diff| {d64:.2e} (need <= 1e-5), same Viterbi paths {paths64}; "
          f"fp32 max |diff| {d32:.2e}, same paths {paths32}")
    if d64 > 1e-5 or not (paths64 and paths32):
        raise SystemExit("the two CRFs disagree")

    def backward(ll_fn, a):
        """One backward pass of the mean negative log-likelihood to phi and the transitions `a`
        (pytorch-crf's own parameter for it, which its forward reads)."""
        p = phi.clone().requires_grad_(True)

        def step():
            return torch.autograd.grad(-ll_fn(p, a).mean(), (p, a))
        return step

    with torch.no_grad():
        runs = {
            "log-likelihood (forward)": (lambda: theirs_ll(phi, A), lambda: ours_ll(phi, A)),
            "Viterbi decode": (lambda: theirs_decode(phi, A), lambda: ours_decode(phi, A)),
        }
        results = {name: [_time(f, args.repeats) for f in pair] for name, pair in runs.items()}
    ref.transitions.data = A.clone()
    pair = (backward(lambda p, a: ref(p, tags, mask, reduction="none"), ref.transitions),
            backward(ours_ll, A.clone().requires_grad_(True)))
    results["log-likelihood (forward + backward)"] = [_time(f, args.repeats) for f in pair]
    print(f"{'fp32, best of ' + str(args.repeats):<38} {'pytorch-crf ms':>15} {'textebm ms':>11} {'speed-up':>9}")
    for name, (t_ref, t_ours) in results.items():
        print(f"{name:<38} {t_ref * 1e3:>15.2f} {t_ours * 1e3:>11.2f} {t_ref / t_ours:>8.1f}x")


if __name__ == "__main__":
    main()
