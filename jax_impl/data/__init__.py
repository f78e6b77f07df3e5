"""torch.utils.data without torch: datasets, samplers, collate and the DataLoader.

``Generator``, ``default_generator``, ``manual_seed``, ``initial_seed`` and ``seed`` are
:mod:`jax_impl.random`'s, re-exported here because torch's data code takes a generator.
``default_worker_context()`` is the multiprocessing context workers start with when the loader
names none: forkserver, since ``fork`` of a process running JAX's threads can deadlock.
"""

from jax_impl.data import datasets, transforms
from jax_impl.data._mp_context import default_context as default_worker_context
from jax_impl.data.collate import default_collate, default_convert
from jax_impl.data.dataloader import DataLoader, device_prefetch, get_worker_info
from jax_impl.data.dataset import (
    ConcatDataset,
    Dataset,
    IterableDataset,
    Subset,
    TensorDataset,
    random_split,
)
from jax_impl.data.distributed import DistributedSampler
from jax_impl.data.sampler import (
    BatchSampler,
    RandomSampler,
    Sampler,
    SequentialSampler,
    SubsetRandomSampler,
    WeightedRandomSampler,
)
from jax_impl.random import Generator, default_generator, initial_seed, manual_seed, seed

__all__ = [
    "BatchSampler", "ConcatDataset", "DataLoader", "Dataset", "DistributedSampler", "Generator",
    "IterableDataset", "RandomSampler", "Sampler", "SequentialSampler", "Subset", "SubsetRandomSampler",
    "TensorDataset", "WeightedRandomSampler", "datasets", "default_collate", "default_convert", "default_generator",
    "default_worker_context", "device_prefetch", "get_worker_info", "initial_seed", "manual_seed", "random_split", "seed", "transforms",
]
