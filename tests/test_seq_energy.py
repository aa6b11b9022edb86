"""Sequence energies of papers c and d: shapes, padding invariance, the Linear energy as a sum,
BiTransf's two poolings by hand, and energy.json's pool field."""

from __future__ import annotations

import pytest
import torch

from textebm.errors import InputError
from textebm.models.seq_energy import (
    BiLSTMEnergy,
    BiTransfEnergy,
    EnergySpec,
    LinearEnergy,
    UniTransfEnergy,
    spec_dict,
    spec_from_dict,
)


def _batch():
    ids = torch.tensor([[5, 6, 7, 8], [9, 5, 0, 0]])
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0]])
    return ids, mask


def test_linear_energy_is_a_sum_of_per_token_scalars():
    m = LinearEnergy(12)
    with torch.no_grad():
        m.weight.weight.copy_(torch.arange(12.0)[:, None] / 10)
        m.bias.fill_(0.5)
    ids, mask = _batch()
    torch.testing.assert_close(m(ids, mask), torch.tensor([0.5 + (5 + 6 + 7 + 8) / 10, 0.5 + (9 + 5) / 10]))


def test_every_energy_ignores_padding():
    from textebm.models.build import SmallLMConfig, build_causal_lm, build_encoder

    class Tok:
        bos_token_id, eos_token_id, pad_token_id = 1, 2, 0

        def __len__(self):
            return 12

    torch.manual_seed(0)
    lm = build_causal_lm(SmallLMConfig(layers=1, width=16, heads=2, context=16), Tok())
    enc = build_encoder(SmallLMConfig(layers=1, width=16, heads=2, context=16), Tok())
    ids, mask = _batch()
    for m in (LinearEnergy(12), BiLSTMEnergy(12, 8, 8), UniTransfEnergy(lm.model), BiTransfEnergy(enc),
              BiTransfEnergy(enc, pool="mean")):
        m.eval()
        e = m(ids, mask)
        assert e.shape == (2,) and e.dtype == torch.float32
        e_short = m(ids[1:, :2], mask[1:, :2])  # the second window without its padding
        torch.testing.assert_close(e[1:], e_short, atol=1e-5, rtol=1e-5)


class _IdEncoder(torch.nn.Module):
    """An "encoder" whose top state at a position is (id, 2 id): energies by hand."""

    class config:
        hidden_size = 2

    def forward(self, input_ids, attention_mask):
        class Out:
            last_hidden_state = torch.stack([input_ids.float(), 2 * input_ids.float()], -1)  # (B, T, 2)
        return Out()


def test_bitransf_pools_the_first_position_or_the_mean_of_the_real_tokens():
    """E = w . pooled + b with w = (1, 0.5), b = 0.25, so E = 2 x (pooled id) + 0.25. Windows
    [5 6 7 8] and [9 5] padded with id 3 (a mean over the padding too would give 5, not 7)."""
    ids = torch.tensor([[5, 6, 7, 8], [9, 5, 3, 3]])
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0]])
    energies = {}
    for how in ("first", "mean"):
        m = BiTransfEnergy(_IdEncoder(), pool=how)
        with torch.no_grad():
            m.out.weight.copy_(torch.tensor([[1.0, 0.5]]))
            m.out.bias.fill_(0.25)
        energies[how] = m(ids, mask).tolist()
    assert energies["first"] == [2 * 5 + 0.25, 2 * 9 + 0.25]
    assert energies["mean"] == [2 * 6.5 + 0.25, 2 * 7 + 0.25]
    with pytest.raises(ValueError, match="max"):
        BiTransfEnergy(_IdEncoder(), pool="max")


def test_energy_json_pool_reads_as_first_when_absent_and_is_checked(tmp_path):
    old = {"kind": "bitransf", "vocab_size": 12, "length": 8}  # an energy.json from before the field
    assert spec_from_dict(old, tmp_path / "energy.json").pool == "first"
    assert spec_from_dict({**old, "pool": "mean"}, "e.json").pool == "mean"
    # written back, a first-position energy's energy.json is what it was before the field existed
    assert "pool" not in spec_dict(EnergySpec(**old)) and spec_dict(EnergySpec(**old, pool="mean"))["pool"] == "mean"
    with pytest.raises(InputError, match="e.json.*pool must be one of first, mean, continuation, got 'max'"):
        spec_from_dict({**old, "pool": "max"}, "e.json")
    with pytest.raises(InputError, match="e.json.*not a pooling of a bilstm energy"):
        spec_from_dict({**old, "kind": "bilstm", "pool": "mean"}, "e.json")
    # continuation pooling needs the one prefix length it pools after, in the shared vocabulary
    with pytest.raises(InputError, match="e.json.*needs `contexts`"):
        spec_from_dict({**old, "kind": "unitransf", "pool": "continuation"}, "e.json")
    with pytest.raises(InputError, match="e.json.*needs `contexts`"):
        spec_from_dict({**old, "pool": "continuation", "contexts": [4], "retokenize": True}, "e.json")
    assert spec_from_dict({**old, "kind": "unitransf", "pool": "continuation", "contexts": [4]}, "e.json").pool \
        == "continuation"
