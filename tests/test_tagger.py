"""The BiLSTM-CRF tagger (models/crf.py): it learns a deterministic tagging task, its states
ignore padding and are shifted as eq. (3) reads them, and its folder saves and loads exactly."""

from __future__ import annotations

import json

import pytest
import torch

from textebm.errors import InputError, TextebmError
from textebm.models.crf import BiLSTMCRF, TaggerSpec, save_tagger
from textebm.models.load import TAGGER, find_model, inspect_folder, load_tagger

WORDS = 6  # word ids 1..6; 0 is padding


def _toy_batch(g: torch.Generator, B: int = 32, T: int = 10):
    """Random sentences of lengths 1..T; tag_t = (w_t + w_{t-1}) mod 3, with w_0 = 0: a tag depends
    on the word and the one before it."""
    lengths = torch.randint(1, T + 1, (B,), generator=g)
    mask = torch.arange(T)[None] < lengths[:, None]  # (B, T)
    words = torch.randint(1, WORDS + 1, (B, T), generator=g).masked_fill(~mask, 0)
    prev = torch.cat([torch.zeros(B, 1, dtype=torch.long), words[:, :-1]], 1)
    tags = ((words + prev) % 3).masked_fill(~mask, -1)
    return words, tags, mask


def _tiny(seed: int = 0) -> BiLSTMCRF:
    torch.manual_seed(seed)
    return BiLSTMCRF(TaggerSpec(vocab_size=WORDS + 1, tags=["a", "b", "c"], embed=12, hidden=16))


def test_a_tiny_tagger_learns_a_deterministic_task():
    model = _tiny()
    g = torch.Generator().manual_seed(1)
    opt = torch.optim.Adam(model.parameters(), lr=0.03)
    words, tags, mask = _toy_batch(torch.Generator().manual_seed(99), B=200)

    def accuracy():
        model.eval()
        pred = model.decode(words, mask)
        model.train()
        return (pred[mask] == tags[mask]).float().mean().item()

    before = accuracy()
    for _ in range(150):
        w, y, m = _toy_batch(g)
        loss = model.nll(w, y, m)
        opt.zero_grad()
        loss.backward()
        opt.step()
    after = accuracy()
    assert before < 0.6 and after > 0.95, (before, after)
    assert loss.item() < 0.2


def test_states_ignore_padding_and_are_shifted_as_eq_3_reads_them():
    model = _tiny().eval()
    words = torch.tensor([[3, 1, 4, 1, 5], [2, 6, 0, 0, 0]])
    mask = words > 0
    with torch.no_grad():
        h_f, h_b = model.states(words, mask)
        alone_f, alone_b = model.states(words[1:, :2], mask[1:, :2])
        before, after = model.neighbour_states(words, mask)
        phi, phi_alone = model.potentials(words, mask), model.potentials(words[1:, :2], mask[1:, :2])
    H = model.spec.hidden
    assert h_f.shape == h_b.shape == before.shape == after.shape == (2, 5, H)
    torch.testing.assert_close(h_f[1, :2], alone_f[0])  # padding is never read, in either direction
    torch.testing.assert_close(h_b[1, :2], alone_b[0])
    torch.testing.assert_close(phi[1, :2], phi_alone[0])
    assert phi.dtype == torch.float32 and phi.shape == (2, 5, 3)
    assert torch.all(h_f[1, 2:] == 0) and torch.all(h_b[1, 2:] == 0)
    # eq. (3): token x_t is scored by h_f at t-1 and h_b at t+1; none before the first / after the last token
    torch.testing.assert_close(before[:, 1:], h_f[:, :-1] * mask[:, 1:, None])
    torch.testing.assert_close(after[0, :-1], h_b[0, 1:])
    assert torch.all(before[:, 0] == 0) and torch.all(after[0, 4] == 0) and torch.all(after[1, 1:] == 0)
    torch.testing.assert_close(after[1, 0], h_b[1, 1])


def test_save_and_load_give_identical_potentials(tmp_path):
    model = _tiny(seed=3)
    with torch.no_grad():
        model.transitions.normal_()  # not the zeros it starts from
    words, tags, mask = _toy_batch(torch.Generator().manual_seed(4), B=5)
    save_tagger(model, tmp_path / "run" / "model")
    assert inspect_folder(tmp_path / "run").kind == TAGGER
    loaded = load_tagger(tmp_path / "run")  # RUN/model found from RUN
    assert loaded.spec == model.spec and not loaded.training
    model.eval()
    with torch.no_grad():
        assert torch.equal(loaded.potentials(words, mask), model.potentials(words, mask))
        assert torch.equal(loaded.transitions, model.transitions)
        assert torch.equal(loaded.decode(words, mask), model.decode(words, mask))
        assert torch.equal(loaded.nll(words, tags, mask), model.nll(words, tags, mask))


def test_a_bad_or_foreign_folder_is_refused(tmp_path):
    folder = tmp_path / "m"
    save_tagger(_tiny(), folder)
    spec = json.loads((folder / "tagger.json").read_text())
    (folder / "tagger.json").write_text(json.dumps({**spec, "tags": ["a", "a"]}))
    with pytest.raises(InputError, match=r"tagger.json.*'tags' must be a non-empty list of distinct tags"):
        load_tagger(folder)
    (folder / "tagger.json").write_text(json.dumps({**spec, "hidden": 8}))  # weights no longer fit
    with pytest.raises(TextebmError, match=r"m: cannot load the model"):
        load_tagger(folder)
    other = tmp_path / "energy"
    other.mkdir()
    (other / "energy.json").write_text("{}")
    with pytest.raises(TextebmError, match="a textebm sequence energy, not a textebm tagger; expected a tagger"):
        find_model(other, TAGGER)
