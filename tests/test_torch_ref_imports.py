"""torch_ref imports no JAX: the torch reference runs in a process where jax never starts."""

import subprocess
import sys
import textwrap

CHECK = textwrap.dedent(
    """
    import sys
    import torch_ref.data, torch_ref.lr_scheduler, torch_ref.models, torch_ref.optim, torch_ref.parallel
    after_import = sorted(m for m in ("jax", "jaxlib", "flax", "optax") if m in sys.modules)
    torch_ref.models.LeNet(10, 1, 8)
    torch_ref.data.digits(train=True)
    after_use = sorted(m for m in ("jax", "jaxlib", "flax", "optax") if m in sys.modules)
    print(after_import, after_use)
    """
)


def test_torch_ref_imports_and_builds_without_jax():
    result = subprocess.run([sys.executable, "-c", CHECK], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split("\n")[0] == "[] []", result.stdout


def test_jax_impl_packages_name_their_lazy_attributes():
    # The attributes jax_impl.models / jax_impl.parallel import on first use are the real objects.
    import jax_impl.models as jm
    import jax_impl.parallel as jp
    from jax_impl.models.lenet import LeNet
    from jax_impl.parallel.launch import launch
    from jax_impl.parallel.step import TrainState

    assert jm.LeNet is LeNet and jp.TrainState is TrainState and jp.launch is launch
    assert set(jm.__all__) <= set(dir(jm)) and set(jp.__all__) <= set(dir(jp))
