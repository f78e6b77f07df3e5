"""torch.optim reimplemented as optax transformations with torch's exact arithmetic.

Each function takes exactly the keyword arguments of the torch class of the
same name (lower-cased), with torch's defaults, and returns an
:class:`~jax_impl.optim.TorchTransformation`: optax's ``init``/``update``
pair plus ``step``, torch's exact update.
"""

from jax_impl.optim._base import TorchTransformation, fixed_horizon, host_schedule, is_host_schedule
from jax_impl.optim._sqrt import get_sqrt_mode, get_sqrt_table, set_sqrt_mode, set_sqrt_table, torch_sqrt
from jax_impl.optim.adadelta import AdadeltaState, adadelta
from jax_impl.optim.adagrad import AdagradState, adagrad
from jax_impl.optim.adam import AdamState, adam, adamw
from jax_impl.optim.adamax import AdamaxState, adamax
from jax_impl.optim.asgd import ASGDState, asgd
from jax_impl.optim import lr_scheduler
from jax_impl.optim.lbfgs import LBFGS, LBFGSState, lbfgs
from jax_impl.optim.adafactor import AdafactorState, adafactor
from jax_impl.optim.muon import MuonState, muon
from jax_impl.optim.sparse_adam import MaskedGrad, SparseAdamState, SparseGrad, sparseadam
from jax_impl.optim import swa_utils
from jax_impl.optim.nadam import NAdamState, nadam
from jax_impl.optim.param_groups import ParamGroupsState, param_groups
from jax_impl.optim.radam import RAdamState, radam
from jax_impl.optim.rmsprop import RMSpropState, rmsprop
from jax_impl.optim.rprop import RpropState, rprop
from jax_impl.optim.sgd import SGDState, sgd

__all__ = [
    "ASGDState",
    "AdafactorState",
    "AdadeltaState",
    "AdagradState",
    "AdamState",
    "AdamaxState",
    "LBFGS",
    "LBFGSState",
    "MuonState",
    "NAdamState",
    "ParamGroupsState",
    "RAdamState",
    "RMSpropState",
    "RpropState",
    "SGDState",
    "MaskedGrad",
    "SparseAdamState",
    "SparseGrad",
    "TorchTransformation",
    "adadelta",
    "adafactor",
    "adagrad",
    "adam",
    "adamax",
    "adamw",
    "asgd",
    "fixed_horizon",
    "get_sqrt_mode",
    "get_sqrt_table",
    "host_schedule",
    "is_host_schedule",
    "lr_scheduler",
    "lbfgs",
    "muon",
    "nadam",
    "param_groups",
    "radam",
    "rmsprop",
    "rprop",
    "set_sqrt_mode",
    "set_sqrt_table",
    "sgd",
    "sparseadam",
    "swa_utils",
    "torch_sqrt",
]
