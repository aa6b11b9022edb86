"""Sequence energies of paper c: shapes, padding invariance, and the Linear energy as a sum."""

from __future__ import annotations

import torch

from textebm.models.seq_energy import BiLSTMEnergy, BiTransfEnergy, LinearEnergy, UniTransfEnergy


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
    for m in (LinearEnergy(12), BiLSTMEnergy(12, 8, 8), UniTransfEnergy(lm.model), BiTransfEnergy(enc)):
        m.eval()
        e = m(ids, mask)
        assert e.shape == (2,) and e.dtype == torch.float32
        e_short = m(ids[1:, :2], mask[1:, :2])  # the second window without its padding
        torch.testing.assert_close(e[1:], e_short, atol=1e-5, rtol=1e-5)
