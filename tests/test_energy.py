import math

import pytest
import torch

from textebm.energy import (ENERGY_CHOICES, VARIANTS, ScalarEnergyHead, energy_from, energy_head, hidden_energy, pool,
                            sequence_energy, sharp_hidden_energy)


def test_hidden_energy_hand_values():
    logits = torch.tensor([[0.0, 0.0], [1.0, 2.0], [math.log(3.0), math.log(5.0)]], dtype=torch.float64)
    # -log(e^0 + e^0) = -log 2; -log(e + e^2); -log(3 + 5) = -log 8
    expected = torch.tensor([-math.log(2.0), -math.log(math.e + math.e**2), -math.log(8.0)], dtype=torch.float64)
    torch.testing.assert_close(hidden_energy(logits), expected)


def test_sharp_hidden_energy_hand_values():
    logits = torch.tensor([[0.0, 0.0], [1.0, 2.0], [-3.0, -7.0]])
    torch.testing.assert_close(sharp_hidden_energy(logits), torch.tensor([0.0, -2.0, 3.0]))


def test_hidden_is_stable_for_large_logits():
    logits = torch.tensor([[1000.0, 1000.0], [-1000.0, -1000.0]])
    out = hidden_energy(logits)
    torch.testing.assert_close(out, torch.tensor([-1000.0 - math.log(2.0), 1000.0 - math.log(2.0)]))


@pytest.mark.parametrize("num_classes", [1, 2, 3, 7])
def test_bounds_hidden_le_sharp_le_hidden_plus_log_classes(num_classes):
    torch.manual_seed(0)
    logits = torch.randn(200, num_classes, dtype=torch.float64) * 5
    h = hidden_energy(logits)
    s = sharp_hidden_energy(logits)
    assert torch.all(h <= s + 1e-12)
    assert torch.all(s <= h + math.log(num_classes) + 1e-12)
    # equality on the right when all logits are equal
    flat = torch.zeros(1, num_classes, dtype=torch.float64)
    torch.testing.assert_close(sharp_hidden_energy(flat), hidden_energy(flat) + math.log(num_classes))


def test_scalar_head_shape_and_value():
    head = ScalarEnergyHead(hidden=4)
    with torch.no_grad():
        head.proj.weight.copy_(torch.tensor([[1.0, -1.0, 0.5, 0.0]]))
        head.proj.bias.fill_(0.25)
    pooled = torch.tensor([[1.0, 2.0, 4.0, 9.0], [0.0, 0.0, 0.0, 0.0]])
    out = head(pooled)
    assert out.shape == (2,)
    torch.testing.assert_close(out, torch.tensor([1.0 - 2.0 + 2.0 + 0.25, 0.25]))


def test_energy_from_dispatch():
    logits = torch.tensor([[1.0, 2.0]])
    torch.testing.assert_close(energy_from("hidden", logits), hidden_energy(logits))
    torch.testing.assert_close(energy_from("sharp-hidden", logits), sharp_hidden_energy(logits))
    scalar = torch.tensor([0.7])
    assert energy_from("scalar", logits, scalar=scalar) is scalar
    with pytest.raises(ValueError, match="ScalarEnergyHead"):
        energy_from("scalar", logits)
    with pytest.raises(ValueError, match="unknown energy variant"):
        energy_from("sharp_hidden", logits)


def test_gradients_flow():
    logits = torch.tensor([[1.0, 3.0, 2.0]], requires_grad=True)
    sharp_hidden_energy(logits).sum().backward()
    torch.testing.assert_close(logits.grad, torch.tensor([[0.0, -1.0, 0.0]]))
    logits.grad = None
    hidden_energy(logits).sum().backward()
    torch.testing.assert_close(logits.grad, -torch.softmax(logits.detach(), -1))


def test_pool_mean_and_cls_by_hand():
    h = torch.tensor([[[1.0, 2.0], [3.0, 4.0], [100.0, 100.0]],
                      [[5.0, 6.0], [7.0, 8.0], [9.0, 10.0]]])  # (B=2, T=3, H=2)
    mask = torch.tensor([[1, 1, 0], [1, 1, 1]])
    torch.testing.assert_close(pool(h, mask, "mean"), torch.tensor([[2.0, 3.0], [7.0, 8.0]]))  # pads ignored
    torch.testing.assert_close(pool(h, mask, "cls"), torch.tensor([[1.0, 2.0], [5.0, 6.0]]))
    assert pool(h.bfloat16(), mask, "mean").dtype == torch.bfloat16
    torch.testing.assert_close(pool(torch.zeros(1, 2, 3), torch.zeros(1, 2, dtype=torch.long)), torch.zeros(1, 3))
    with pytest.raises(ValueError, match="unknown pooling"):
        pool(h, mask, "max")


def test_sequence_energy_dispatch():
    assert ENERGY_CHOICES == ("none", *VARIANTS)
    logits, pooled = torch.tensor([[1.0, 2.0], [0.0, -1.0]]), torch.randn(2, 4)
    assert sequence_energy("none", logits, pooled) is None
    torch.testing.assert_close(sequence_energy("hidden", logits, pooled), hidden_energy(logits))
    torch.testing.assert_close(sequence_energy("sharp-hidden", logits, pooled), sharp_hidden_energy(logits))
    head = energy_head("scalar", 4)
    torch.testing.assert_close(sequence_energy("scalar", logits, pooled, head), head(pooled))
    assert energy_head("hidden", 4) is None and energy_head("none", 4) is None
    with pytest.raises(ValueError, match="ScalarEnergyHead"):
        sequence_energy("scalar", logits, pooled)
    with pytest.raises(ValueError, match="unknown energy variant"):
        energy_head("magic", 4)


def test_fp32_linear_is_the_one_output_layer():
    """Energy and score heads (sequence energies, cloze towers) share `fp32_linear`: fp32 output
    from a bf16 body, equal to the hand-written product."""
    import torch

    from textebm.energy import fp32_linear

    g = torch.Generator().manual_seed(0)
    h = torch.randn(3, 5, 8, generator=g).to(torch.bfloat16)
    w, b = torch.randn(2, 8, generator=g).to(torch.bfloat16), torch.randn(2, generator=g)
    out = fp32_linear(h, w, b)
    assert out.dtype == torch.float32 and out.shape == (3, 5, 2)
    torch.testing.assert_close(out, h.float() @ w.float().T + b)
