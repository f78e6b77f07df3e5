"""The distribution as installed: jax_impl works without torch; packages import."""

import importlib
import pkgutil
import subprocess
import sys
import textwrap

import jax_impl

BLOCK_TORCH = textwrap.dedent(
    """
    import importlib, pkgutil, sys

    class BlockTorch:
        def find_spec(self, name, path=None, target=None):
            if name == "torch" or name.startswith("torch."):
                raise ImportError(f"torch is blocked in this test: {name}")
            return None

    sys.meta_path.insert(0, BlockTorch())
    import jax_impl
    names = [m.name for m in pkgutil.walk_packages(jax_impl.__path__, "jax_impl.")]
    for name in names:
        importlib.import_module(name)
    assert not any(m == "torch" or m.startswith("torch.") for m in sys.modules), "torch got imported"
    print("imported", 1 + len(names), "modules without torch")
    """
)


def test_jax_impl_imports_without_torch():
    result = subprocess.run([sys.executable, "-c", BLOCK_TORCH], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert "without torch" in result.stdout


def test_block_is_effective():
    # The same guard does stop a torch import (so the test above proves something).
    code = BLOCK_TORCH.replace("import jax_impl\n", "import torch\nimport jax_impl\n", 1)
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert result.returncode != 0 and "torch is blocked" in result.stderr


def test_all_packages_import():
    for package in ("parity", "torch_ref", "jax_impl"):
        module = importlib.import_module(package)
        for info in pkgutil.walk_packages(module.__path__, f"{package}."):
            if info.name.endswith("__main__"):
                continue
            importlib.import_module(info.name)
