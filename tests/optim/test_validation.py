"""Arguments against torch's: signatures and defaults, torch-only flags (``_validation`` / ``_base``).

The per-optimizer ValueError cases live in each optimizer's test file
(``test_<name>_validation``, through ``_harness.assert_same_validation``).
"""

import pytest

from tests.optim import _harness as H


@pytest.mark.parametrize("name", H.all_names())
def test_signature_and_defaults_match_torch(name):
    # Same names, same order, same kinds (positional vs keyword-only), equal defaults (0 == 0.0).
    assert list(H.jax_defaults(name).items()) == list(H.torch_defaults(name).items())


# foreach=True is reproduced (tests/optim/test_foreach.py), and fused=True where torch has a fused CPU kernel
# (tests/optim/test_fused.py); the other flags are refused.
FUSED = ("sgd", "adagrad", "adam", "adamw")


@pytest.mark.parametrize(("name", "flag"), [(n, f) for n in H.all_names() for f in H.flags_of(n)
                                            if f != "foreach" and not (f == "fused" and n in FUSED)])
def test_torch_only_flags_raise_not_implemented(name, flag):
    with pytest.raises(NotImplementedError, match=flag):
        H.build(name, {flag: True})


@pytest.mark.parametrize("name", H.all_names())
def test_default_flag_values_accepted(name):
    # foreach=False is torch's explicit single-tensor path, the one reproduced.
    H.build(name, {flag: False for flag in H.flags_of(name)})
    H.build(name, {flag: None for flag in ("foreach", "fused") if flag in H.flags_of(name)})
