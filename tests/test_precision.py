"""`--precision auto`: bf16 only where the hardware multiplies it natively (textebm.precision)."""

from __future__ import annotations

import logging

import pytest

from textebm import precision as P
from textebm.errors import TextebmError


@pytest.fixture
def cpu(monkeypatch):
    """Pretend to be a CPU with the given flags and probe figures (fp32, bf16 GFLOP/s)."""

    def set_(flags: set[str], fp32: float, bf16: float) -> None:
        monkeypatch.setattr(P, "cpu_flags", lambda: flags)
        monkeypatch.setattr(P, "matmul_probe", lambda: (fp32, bf16))

    return set_


def test_auto_picks_bf16_on_a_cpu_with_native_bf16(cpu):
    cpu({"avx2", "avx512_bf16"}, 68.0, 318.0)
    c = P.resolve_precision("auto", "cpu")
    assert c.precision == "bf16" and "avx512_bf16" in c.reason and "318" in c.reason
    assert c.as_dict()["bf16_gflops"] == 318.0


def test_auto_picks_fp32_on_an_avx2_cpu(cpu):
    cpu({"avx2"}, 30.0, 0.7)  # the AMD EPYC of the issue: bf16 40x slower
    c = P.resolve_precision("auto", "cpu")
    assert c.precision == "fp32" and "no native bf16" in c.reason


def test_auto_needs_the_probe_to_confirm_the_flags(cpu):
    cpu({"amx_bf16"}, 60.0, 70.0)  # listed, but not 1.5x faster here
    assert P.resolve_precision("auto", "cpu").precision == "fp32"


def test_explicit_bf16_on_a_slow_cpu_warns_with_the_measured_slowdown(cpu, caplog):
    cpu({"avx2"}, 30.0, 0.75)
    with caplog.at_level(logging.WARNING, logger="textebm.precision"):
        c = P.resolve_precision("bf16", "cpu")
    assert c.precision == "bf16"
    assert "40x slower" in caplog.text and "auto would pick fp32" in caplog.text


def test_fp16_needs_cuda_and_unknown_values_are_refused():
    with pytest.raises(TextebmError, match="fp16 needs a CUDA GPU"):
        P.resolve_precision("fp16", "cpu")
    with pytest.raises(TextebmError, match="--precision"):
        P.resolve_precision("fp8", "cpu")


def test_a_preempted_repetition_does_not_sway_the_probe():
    """best_rate keeps the fastest call: a clock that shows one call stalled for 10 ms (the
    scheduler gave the core away) among calls of 1 ms still measures 1 ms per call."""
    ticks = iter([0.0, 0.010, 0.010, 0.011, 0.011, 0.012, 0.012, 0.013])  # start/stop pairs
    calls = []
    rate = P.best_rate(lambda: calls.append(1), work=2.0, max_reps=4, budget_s=1.0, clock=lambda: next(ticks))
    assert len(calls) == 4 and rate == pytest.approx(2.0 / 0.001)
    # the budget stops it after the first call that uses it up; at least one call always runs
    ticks = iter([0.0, 2.0])
    assert P.best_rate(lambda: None, work=1.0, max_reps=5, budget_s=0.5, clock=lambda: next(ticks)) == 0.5


def test_the_probe_measures_this_cpu():
    fp32, bf16 = P.matmul_probe()
    assert fp32 > 0.5 and bf16 > 0.01  # real measurements, in GFLOP/s
    c = P.resolve_precision("auto", "cpu")
    native = bool({"avx512_bf16", "amx_bf16"} & P.cpu_flags())
    assert c.precision == ("bf16" if native and bf16 >= P.MIN_SPEEDUP * fp32 else "fp32")
