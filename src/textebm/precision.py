"""Choose the numeric precision for the hardware at hand (`--precision auto`, the default).

bf16 is a large win only where the hardware multiplies bfloat16 natively: CUDA GPUs with bf16
support, and CPUs with AVX512-BF16 or AMX (about 4x fp32 for matrix work). On a CPU without them
(AVX2 only, many laptops and older AMD servers) torch emulates bf16 and a bf16 matrix product was
measured 40x *slower* than fp32. So `auto` picks:

- CUDA: bf16 when `torch.cuda.is_bf16_supported()`, else fp32;
- CPU: bf16 only when /proc/cpuinfo lists `avx512_bf16` or `amx_bf16` AND a short timed probe
  (a 256 x 256 matrix product in both precisions, a few milliseconds) finds bf16 at least 1.5x
  faster than fp32; fp32 otherwise.

An explicit `--precision bf16` on a CPU where the probe finds bf16 slower is honoured with a
warning giving the measured slowdown; `fp16` needs CUDA. The choice and its reason are logged at
start and recorded (`PrecisionChoice.as_dict`) in config.json, metrics.json and reports. Metrics
are always computed in fp32 or better, whatever precision the model ran in.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import math
import os
import platform
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import torch

from textebm.errors import TextebmError
from textebm.io import read_json

log = logging.getLogger(__name__)

CHOICES = ("auto", "fp32", "bf16", "fp16")
BF16_FLAGS = ("avx512_bf16", "amx_bf16")
MIN_SPEEDUP = 1.5  # bf16 must be this much faster than fp32 in the probe for `auto` to pick it
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
BENCH = "bench/results/performance/bench_precision.json"
# What a token's score (log-probability, energy, PLL term) may differ from fp32's, in nats, by how
# a model's products run (measured on SmolLM2-135M, a masked LM and Electric on MiniLM-L6, 300 PTB
# test sentences: BENCH and docs/performance.md, "Precision"). fpmath meets issue 33's target
# (mean <= 0.005, worst token <= 0.1); cast does not on a deep model, so `auto` never picks it
# for inference.
TOLERANCE = {
    "fp32": {"mean_abs": 0.0, "max_abs": 0.0, "source": "the reference"},
    "fpmath": {"mean_abs": 0.005, "max_abs": 0.1, "source": BENCH},
    "cast": {"mean_abs": 0.05, "max_abs": 1.0, "source": BENCH},
}


@dataclass(frozen=True)
class PrecisionChoice:
    precision: str  # fp32 | bf16 | fp16: what runs
    requested: str  # what the user asked for (auto | fp32 | bf16 | fp16)
    device: str  # cpu | cuda
    reason: str  # one sentence, for the log and the report
    cpu_capability: str  # torch.backends.cpu.get_cpu_capability()
    fp32_gflops: float | None = None  # probe results (CPU only, when probed)
    bf16_gflops: float | None = None
    products: str = ""  # inference in bf16/fp16: "fpmath" or "cast" (textebm.models.mixed); "" else

    @property
    def tolerance(self) -> dict | None:
        """The stated largest difference of a token's score from fp32's, in nats (`TOLERANCE`); None
        for a training precision (autocast: no score is read from it)."""
        if self.precision == "fp32":
            return TOLERANCE["fp32"]
        return TOLERANCE[self.products] if self.products else None

    @property
    def dtype(self) -> torch.dtype:
        return DTYPES[self.precision]

    def as_dict(self) -> dict:
        return {**asdict(self), "tolerance": self.tolerance}


def fp32_or_better(*dtypes: torch.dtype) -> torch.dtype:
    """The dtype metrics and sums are computed in: fp32, or fp64 where an input is fp64 (a model
    that ran in bf16 still gives fp32 numbers; a float64 reference stays exact)."""
    out = torch.float32
    for dt in dtypes:
        out = torch.promote_types(out, dt)
    return out


def cpu_flags() -> set[str]:
    """CPU feature flags from /proc/cpuinfo (Linux); empty where unreadable."""
    try:
        info = Path("/proc/cpuinfo").read_text()
    except OSError:
        return set()
    line = next((ln for ln in info.splitlines() if ln.startswith("flags")), "")
    return set(line.split(":", 1)[1].split()) if ":" in line else set()


def cpu_name() -> str:
    """The CPU's model name (/proc/cpuinfo), for the labels of timings; the platform's processor
    elsewhere."""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine() or "unknown CPU"


def cpu_capability() -> str:
    try:
        return str(torch.backends.cpu.get_cpu_capability())
    except Exception:  # noqa: BLE001 - older torch
        return "unknown"


def best_rate(fn, work: float, max_reps: int = 20, budget_s: float = 0.5, clock=time.perf_counter) -> float:
    """`work` / the fastest of up to `max_reps` timed calls of `fn` (at least one; stops once
    `budget_s` has been spent). The fastest call, not the mean: on a shared CPU a call that the
    scheduler preempts only ever runs slower, so one preemption cannot sway the result, while a
    CPU that emulates an operation is slow in every call."""
    best, spent, reps = math.inf, 0.0, 0
    while reps < max_reps and (reps == 0 or spent < budget_s):
        start = clock()
        fn()
        dt = clock() - start
        best, spent, reps = min(best, dt), spent + dt, reps + 1
    return work / max(best, 1e-9)


@functools.lru_cache(maxsize=1)
def matmul_probe(n: int = 256, budget_s: float = 0.5) -> tuple[float, float]:
    """(fp32, bf16) GFLOP/s of an n x n matrix product on one core of this CPU: the fastest of
    several repetitions each (`best_rate`), after one warm-up.

    Stops early once a precision has used `budget_s`, so an emulating CPU costs well under a
    second. Cached for the process."""
    out, threads = [], torch.get_num_threads()
    torch.set_num_threads(1)  # one core: a product split over threads waits for the slowest, and on
    try:                      # a busy CPU that is one whose core is taken, in every repetition
        for dtype in (torch.float32, torch.bfloat16):
            g = torch.Generator().manual_seed(0)
            a = torch.randn(n, n, generator=g).to(dtype)
            b = torch.randn(n, n, generator=g).to(dtype)
            a @ b  # warm-up
            out.append(best_rate(lambda: a @ b, 2 * n**3 / 1e9, budget_s=budget_s))
    finally:
        torch.set_num_threads(threads)
    return out[0], out[1]


def matmul_peak(dtype: torch.dtype, n: int = 1024, budget_s: float = 1.0) -> float:
    """FLOP/s of an n x n matrix product in `dtype` at the current thread count: the fastest of
    several repetitions (`best_rate`) after one warm-up. The project's one definition of the
    "peak" that benchmarks state their fraction of (bench/bench_hot_paths.py, bench_scoring.py):
    a large product, so it measures the matrix units and not the call overhead, on the threads the
    measured work runs on, in the same process and run."""
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(n, n, generator=g).to(dtype), torch.randn(n, n, generator=g).to(dtype)
    a @ b  # warm-up
    return best_rate(lambda: a @ b, 2.0 * n**3, max_reps=1000, budget_s=budget_s)


FPMATH_MAX_ERROR = 1e-5  # relative error of a reduced fp32 product that counts as fp32-accurate


def _onednn_matmul():
    """torch's oneDNN matmul settings (`fp32_precision`), or None before torch 2.9."""
    return getattr(torch.backends.mkldnn, "matmul", None)


@contextlib.contextmanager
def reduced_fp32_matmul():
    """fp32 matrix products inside run with oneDNN's bf16 arithmetic ("fpmath mode bf16":
    `torch.backends.mkldnn.matmul.fp32_precision = "bf16"`): fp32 in, fp32 out. On a CPU with
    native bf16 oneDNN's kernel for it was measured as accurate as fp32 (relative error 8e-7 on a
    1024 x 1024 product, 2e-7 on small ones) at 2.2x fp32's speed (`fpmath_probe` checks both on
    the CPU at hand). Restores the earlier setting on exit; ignored by torch on a CPU without
    native bf16."""
    matmul = _onednn_matmul()
    if matmul is None:  # torch before 2.9: a no-op
        yield
        return
    before = matmul.fp32_precision
    matmul.fp32_precision = "bf16"
    try:
        yield
    finally:
        matmul.fp32_precision = before


@functools.lru_cache(maxsize=1)
def fpmath_probe(n: int = 256, budget_s: float = 0.3) -> tuple[float, float]:
    """(speed-up over fp32, largest relative error against float64) of an n x n fp32 product
    under `reduced_fp32_matmul`, on one core; cached for the process. Decides how bf16 inference
    computes its products (`bf16_products`)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        g = torch.Generator().manual_seed(0)
        a, b = torch.randn(n, n, generator=g), torch.randn(n, n, generator=g)
        ref = a.double() @ b.double()
        a @ b  # warm-up
        fp32 = best_rate(lambda: a @ b, 1.0, budget_s=budget_s)
        with reduced_fp32_matmul():
            got = a @ b
            reduced = best_rate(lambda: a @ b, 1.0, budget_s=budget_s)
    finally:
        torch.set_num_threads(threads)
    error = float((got.double() - ref).abs().max() / ref.abs().max())
    return reduced / fp32, error


def bf16_products(device: str) -> str:
    """How a model run in bf16 computes its matrix products (`textebm.models.mixed`): "fpmath"
    (fp32 weights, oneDNN's bf16 arithmetic, as accurate as fp32) on a CPU where `fpmath_probe`
    finds that both accurate and at least `MIN_SPEEDUP` x faster; "cast" (bf16 weights and inputs,
    8-bit mantissas: the products' error is bf16's) elsewhere, GPUs included."""
    if device != "cpu" or not (set(BF16_FLAGS) & cpu_flags()) or _onednn_matmul() is None:
        return "cast"
    speedup, error = fpmath_probe()
    return "fpmath" if error <= FPMATH_MAX_ERROR and speedup >= MIN_SPEEDUP else "cast"


def resolve_for_run(requested: str, run: Path, resume: bool) -> PrecisionChoice:
    """`--precision` resolved for a training run in `run`: a resumed run keeps the precision it
    started with (RUN/config.json's `precision_choice`, when it was asked for the same way)."""
    if resume and (run / "config.json").is_file():
        old = read_json(run / "config.json").get("precision_choice")
        if isinstance(old, dict) and old.get("requested") == requested:
            choice = resolve_precision(old["precision"])
            return replace(choice, requested=requested,
                           reason=f"{old['precision']}: as when the run started ({old.get('reason')})")
    return resolve_precision(requested)


def resolve_precision(requested: str = "auto", device: str | None = None, inference: bool = False
                      ) -> PrecisionChoice:
    """The precision to run in, with its reason (see the module doc). With `inference` the
    choice is for running a trained model (`resolve_inference`), else for training."""
    if requested not in CHOICES:
        raise TextebmError(f"--precision must be one of {', '.join(CHOICES)}, got {requested!r}")
    device = device or inference_device().type
    if inference:
        return resolve_inference(requested, device)
    cap = cpu_capability()
    if device == "cuda":
        bf16_ok = torch.cuda.is_bf16_supported()
        if requested == "auto":
            prec = "bf16" if bf16_ok else "fp32"
            why = "CUDA GPU with bf16 support" if bf16_ok else "CUDA GPU without bf16 support"
            return PrecisionChoice(prec, requested, device, f"{prec}: {why}", cap)
        return PrecisionChoice(requested, requested, device, f"{requested}: asked for (CUDA)", cap)
    if requested == "fp16":
        raise TextebmError("--precision fp16 needs a CUDA GPU; on a CPU use auto, fp32 or bf16")
    if requested == "fp32":
        return PrecisionChoice("fp32", requested, device, "fp32: asked for", cap)
    native = sorted(set(BF16_FLAGS) & cpu_flags())
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        # Several processes (accelerate launch) share the cores: timed probes could disagree
        # between them, and every process must run in the same precision. Decide by flags alone.
        prec = "bf16" if native or requested == "bf16" else "fp32"
        why = (f"{prec}: {'asked for' if requested == 'bf16' else 'CPU flags ' + '/'.join(native) if native else 'no native bf16'}"
               " (several processes: decided by CPU flags, no timed probe)")
        return PrecisionChoice(prec, requested, device, why, cap)
    fp32_gf, bf16_gf = matmul_probe()
    speedup = bf16_gf / fp32_gf
    measured = f"probe: bf16 {bf16_gf:.0f} vs fp32 {fp32_gf:.0f} GFLOP/s"
    if requested == "bf16":
        if not native or speedup < 1.0:
            pace = f"{1 / speedup:.0f}x slower" if speedup < 1.0 else f"only {speedup:.1f}x faster"
            log.warning("--precision bf16 on a CPU without native bf16 (%s, %s; %s): matrix products run %s "
                        "than in fp32 here; --precision auto would pick fp32", cap,
                        "flags " + "/".join(native) if native else "no avx512_bf16/amx_bf16", measured, pace)
        return PrecisionChoice("bf16", requested, device, f"bf16: asked for ({measured})", cap, fp32_gf, bf16_gf)
    if native and speedup >= MIN_SPEEDUP:
        why = f"bf16: CPU {cap} with native {'/'.join(native)}; {measured}"
        return PrecisionChoice("bf16", requested, device, why, cap, fp32_gf, bf16_gf)
    if native:
        why = f"fp32: CPU {cap} lists {'/'.join(native)} but bf16 was not {MIN_SPEEDUP}x faster ({measured})"
    else:
        why = f"fp32: CPU {cap} has no native bf16 (no avx512_bf16/amx_bf16; {measured})"
    return PrecisionChoice("fp32", requested, device, why, cap, fp32_gf, bf16_gf)


def resolve_inference(requested: str, device: str) -> PrecisionChoice:
    """The precision a trained model runs in for scores, samples and evaluation. bf16 computes
    the products in bf16 and keeps the rest fp32 (`textebm.models.mixed`); `auto` picks it only
    where its products are as accurate as fp32 (`bf16_products` = "fpmath": a CPU with native
    bf16 whose oneDNN kernel the probe finds accurate and >= 1.5x faster), so a score never moves
    more than `TOLERANCE["fpmath"]` from fp32's. Elsewhere (GPUs included) `auto` is fp32, and an
    explicit bf16 runs with 8-bit products (`TOLERANCE["cast"]`), with a warning."""
    cap = cpu_capability()
    if requested == "fp32":
        return PrecisionChoice("fp32", requested, device, "fp32: asked for", cap)
    if requested == "fp16":
        if device != "cuda":
            raise TextebmError("--precision fp16 needs a CUDA GPU; on a CPU use auto, fp32 or bf16")
        why = "fp16: asked for (CUDA; products rounded to fp16, the rest fp32)"
        log.warning("--precision fp16: products rounded to fp16; a token's score may move by up to %s nats from "
                    "fp32's (%s)", TOLERANCE["cast"]["max_abs"], BENCH)
        return PrecisionChoice("fp16", requested, device, why, cap, products="cast")
    products = bf16_products(device)
    if products == "fpmath":
        speedup, error = fpmath_probe()
        why = (f"bf16: products in oneDNN's bf16 arithmetic on fp32 tensors, as accurate as fp32 here (probe: "
               f"{speedup:.1f}x fp32's speed, relative error {error:.0e}); norms, softmax and output in fp32")
        return PrecisionChoice("bf16", requested, device, why, cap, products=products)
    place = "CUDA" if device == "cuda" else f"CPU {cap}"
    if requested == "auto":
        why = (f"fp32: bf16 on this {place} would round the products to 8 bits (token scores off fp32 by up to "
               f"{TOLERANCE['cast']['max_abs']} nats, {BENCH}); --precision bf16 trades that for speed")
        return PrecisionChoice("fp32", requested, device, why, cap)
    if device == "cpu" and not (set(BF16_FLAGS) & cpu_flags()):
        log.warning("--precision bf16 on a CPU without native bf16 (%s): matrix products are emulated and run "
                    "many times slower than in fp32; --precision auto would pick fp32", cap)
    log.warning("--precision bf16 on this %s: products rounded to bf16; a token's score may move by up to %s "
                "nats from fp32's (mean %s; %s)", place, TOLERANCE["cast"]["max_abs"], TOLERANCE["cast"]["mean_abs"],
                BENCH)
    why = f"bf16: asked for (products rounded to bf16 on this {place}, the rest fp32)"
    return PrecisionChoice("bf16", requested, device, why, cap, products=products)


def inference_device() -> torch.device:
    """Where inference, evaluation and (through accelerate) training run: the GPU when there is
    one, else the CPU; the CPU also where accelerate is told so (`accelerate launch --cpu`, or
    ACCELERATE_USE_CPU=1), so that `--precision auto` resolves for the device the run uses."""
    if not torch.cuda.is_available():
        return torch.device("cpu")
    from accelerate.utils import parse_flag_from_env  # the flag as accelerate itself reads it

    return torch.device("cpu" if parse_flag_from_env("ACCELERATE_USE_CPU") else "cuda")
