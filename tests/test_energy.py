import math

import pytest
import torch

from textebm.energy import ScalarEnergyHead, energy_from, hidden_energy, sharp_hidden_energy


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
