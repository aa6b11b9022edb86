"""Paper d's joint model on a toy world small enough to enumerate: a vocabulary of 4 tokens (plus
the layout symbols the base LM never writes), 3 generated tokens after a prefix, a tiny random
Llama as the base LM and a causal energy. Every probability here is checked against brute-force
enumeration of the 4^3 continuations."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch

from textebm.models.build import SmallLMConfig, build_causal_lm
from textebm.models.lm import LMMeta
from textebm.models.seq_energy import EnergySpec, build_energy
from textebm.residual.joint import BaseLM, JointEnergy

WORDS = ["a", "b", "c", "d"]
PREFIX = [3, 4, 6, 5]  # a b d c
M = 3  # generated tokens


def toy_tokenizer():
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"<pad>": 0, "<s>": 1, "</s>": 2, **{w: 3 + i for i, w in enumerate(WORDS)}}
    tk = Tokenizer(models.WordLevel(vocab, unk_token="<pad>"))
    tk.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(tokenizer_object=tk, pad_token="<pad>", bos_token="<s>", eos_token="</s>")


@pytest.fixture(scope="module")
def world():
    torch.manual_seed(0)
    tok = toy_tokenizer()
    meta = LMMeta(bos_token="<s>", eos_token="</s>", pad_token="<pad>")
    lm = build_causal_lm(SmallLMConfig(1, 16, 2, context=16), tok, seed=0).eval()
    with torch.no_grad():  # sharper than a fresh init, so the toy distribution is far from uniform
        lm.lm_head.weight.mul_(20)
    body = build_causal_lm(SmallLMConfig(1, 16, 2, context=16), tok, seed=1).model
    spec = EnergySpec(kind="unitransf", vocab_size=len(tok), length=len(PREFIX) + M)
    energy = build_energy(spec, body).eval()
    with torch.no_grad():
        energy.out.weight.normal_(0, 3.0)
    # float64 throughout: the enumerations below are exact to 1e-10
    return {"base": BaseLM(lm.double(), tok, meta, tok), "energy": JointEnergy(energy.double(), spec, tok, tok),
            "tok": tok}


def all_continuations():
    return [list(c) for c in itertools.product(range(3, 7), repeat=M)]


def test_base_lm_bans_layout_symbols_and_normalises_over_fixed_length_continuations(world):
    base = world["base"]
    conts = all_continuations()
    lp = base.continuation_logprobs([PREFIX] * len(conts), conts)  # (64, 3)
    assert math.isclose(float(np.logaddexp.reduce(lp.sum(1))), 0.0, abs_tol=1e-10)
    # each factor is the next-token distribution with [pad] [bos] [eos] removed and renormalised
    nxt = base.next_logprobs([base.context(PREFIX)])[0]
    assert torch.isinf(nxt[:3]).all() and math.isclose(float(nxt.exp().sum()), 1.0, abs_tol=1e-12)
    assert np.allclose(lp[:, 0], nxt[[c[0] for c in conts]].numpy(), atol=1e-12)


def test_unit_energy_with_the_prefix_cached_equals_the_full_pass(world):
    en = world["energy"]
    conts = all_continuations()
    fast = en.continuation_energies(PREFIX, conts, batch_size=7)
    slow = en.energies([PREFIX + c for c in conts])
    assert np.abs(fast - slow).max() < 1e-10
    assert slow.std() > 0.5  # the energies differ enough for the tests below to mean something


def test_exact_last_position_equals_enumeration(world):
    from textebm.residual.bounds import exact_last_log_z

    base, en = world["base"], world["energy"]
    head = PREFIX + [4, 5]
    z = exact_last_log_z(base, en, head)
    lp = base.next_logprobs([base.context(head)])[0].numpy()
    terms = [lp[v] - float(en.energies([head + [v]])[0]) for v in range(3, 7)]
    assert abs(z - float(np.logaddexp.reduce(terms))) < 1e-10
