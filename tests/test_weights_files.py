"""model.safetensors as `checkpoint.save_weights` writes it: the bytes of safetensors' save_model
where that works, and also for weights that share one storage (cuDNN's flat LSTM buffer on a GPU,
imitated here on the CPU), which save_model refuses."""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import load_file, save_model

from textebm.checkpoint import load_weights, save_weights


class Tied(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(11, 4)
        self.lstm = torch.nn.LSTM(4, 3, batch_first=True)
        self.head = torch.nn.Linear(4, 11, bias=False)
        self.head.weight = self.emb.weight  # tied: one Parameter under two names
        self.register_buffer("scale", torch.tensor([2.0]))


def flatten_like_cudnn(lstm: torch.nn.LSTM) -> None:
    """Make the LSTM's weights views of one flat buffer, as cuDNN's flatten_parameters does."""
    params = list(lstm.parameters())
    flat = torch.cat([p.detach().reshape(-1) for p in params])
    at = 0
    for p in params:
        p.data = flat[at:at + p.numel()].view_as(p)
        at += p.numel()


def test_the_bytes_of_save_model_and_a_tied_weight_once(tmp_path):
    torch.manual_seed(0)
    m = Tied()
    save_model(m, str(tmp_path / "ref.safetensors"))
    save_weights(m, tmp_path / "ours.safetensors")
    assert (tmp_path / "ours.safetensors").read_bytes() == (tmp_path / "ref.safetensors").read_bytes()
    assert set(load_file(str(tmp_path / "ours.safetensors"))) == {
        "emb.weight", "lstm.weight_ih_l0", "lstm.weight_hh_l0", "lstm.bias_ih_l0", "lstm.bias_hh_l0", "scale"}


def test_shared_storage_is_saved_and_loads_back_into_a_flat_model(tmp_path):
    torch.manual_seed(0)
    m = Tied()
    flatten_like_cudnn(m.lstm)
    with pytest.raises(RuntimeError, match="None is covering the entire storage"):
        save_model(m, str(tmp_path / "ref.safetensors"))  # what a GPU run hit before save_weights
    save_weights(m, tmp_path / "w.safetensors")
    torch.manual_seed(1)
    other = Tied()
    flatten_like_cudnn(other.lstm)
    assert not torch.equal(other.lstm.weight_hh_l0, m.lstm.weight_hh_l0)
    assert load_weights(other, tmp_path / "w.safetensors") == ([], [])
    for (n, a), (_, b) in zip(m.state_dict().items(), other.state_dict().items(), strict=True):
        assert torch.equal(a, b), n
    assert other.head.weight is other.emb.weight  # still tied
    flat = other.lstm.weight_ih_l0.untyped_storage().data_ptr()
    assert other.lstm.bias_hh_l0.untyped_storage().data_ptr() == flat  # loaded in place, still one buffer


def test_load_weights_names_what_is_missing_and_unexpected(tmp_path):
    m = Tied()
    save_weights(m, tmp_path / "w.safetensors")
    state = load_file(str(tmp_path / "w.safetensors"))
    from safetensors.torch import save_file

    save_file({k: v for k, v in state.items() if k != "scale"} | {"extra": torch.zeros(1)},
              str(tmp_path / "bad.safetensors"))
    assert load_weights(Tied(), tmp_path / "bad.safetensors") == (["scale"], ["extra"])
