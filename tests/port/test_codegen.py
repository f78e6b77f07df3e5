"""The written twin: readable source that imports on its own and behaves as the live object."""

from __future__ import annotations

import numpy as np
import torch

import parity
from parity.convert import module_state
from parity.port import instantiate, load_twin_class
from tests.port import models


def test_written_file_behaves_as_the_live_twin(x64, tmp_path):
    torch.manual_seed(0)
    model = models.TensorOps().double()
    source = parity.port.port_source(model)
    path = tmp_path / "twin.py"
    path.write_text(source)
    from_file = instantiate(load_twin_class(path), model)
    live = parity.port(model)
    assert type(from_file).__name__ == type(live).__name__ == "TensorOps"
    assert sorted(module_state(from_file)) == sorted(module_state(live)) == sorted(model.state_dict())
    x = np.random.default_rng(0).standard_normal((2, 4, 6))
    for got, expected in zip(from_file(x), live(x)):  # the same source: bit-identical
        np.testing.assert_array_equal(np.asarray(got), np.asarray(expected))
    check = parity.port.check_port(model, from_file, input_shape=(2, 4, 6))
    assert check.passed, check.table()


def test_source_reads_like_hand_written_code():
    source = parity.port.port_source(models.VGGStyle())
    assert "class VGGStyle(nn.Module):" in source
    assert "self.features = nn.Sequential(" in source
    assert "nn.Conv2d(3, 4, (3, 3), padding=(1, 1))" in source
    assert "nn.BatchNorm2d(4)" in source
    assert "features_0 = self.features[0](x)" in source
    assert "torch_flatten(avgpool, 1, -1)" in source
    assert "import torch" not in source and "parity" not in source.split('"""', 2)[2]


def test_user_modules_become_holders_with_torch_names():
    source = parity.port.port_source(models.MobileNetStyle())
    assert "class InvertedResidual(nn.Module):" in source
    assert "self.blocks = nn.Sequential(\n            InvertedResidual(\n                block=nn.Sequential(" in source
    assert "nn.Conv2d(16, 16, (3, 3), padding=(1, 1), groups=16, bias=False)" in source


def test_functional_dropout_follows_the_twins_mode():
    source = parity.port.port_source(models.MnistNet())
    assert "F.dropout(dropout2, p=0.3, training=self.training)" in source
    assert "if self.training" not in source


def test_a_sequential_model_is_its_own_twin_class(x64):
    """A torch.nn.Sequential as the model itself: the twin's children are attributes '0', '1', ..., reached
    with getattr (the twin's top class is no Sequential), and eval forward matches torch's."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2)).double().eval()
    assert "getattr(self, '0')" in parity.port.port_source(model)
    twin = parity.port(model, torch.zeros(2, 3, dtype=torch.float64))
    x = np.random.default_rng(0).standard_normal((2, 3))
    # float64 Linear layers: measured 0 or a few ulps apart; bar 1e-12
    np.testing.assert_allclose(np.asarray(twin(x)), model(torch.from_numpy(x)).detach().numpy(), rtol=1e-12, atol=1e-12)
