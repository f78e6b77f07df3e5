"""``torch.utils.data.distributed.DistributedSampler`` without torch.

Process count and index come from ``jax.process_count()`` /
``jax.process_index()`` when not given (torch asks ``torch.distributed``).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sized

from jax_impl.random import Generator
from jax_impl.data.sampler import Sampler


class DistributedSampler(Sampler[int]):
    """Shard a dataset over replicas exactly like torch's ``DistributedSampler``.

    ``num_samples = ceil((L - R) / R)`` if ``drop_last`` and ``L % R`` else
    ``ceil(L / R)``; ``total = num_samples * R``. Each epoch:
    ``idx = randperm(L, Generator().manual_seed(seed + epoch))`` if ``shuffle``
    else ``range(L)``; without ``drop_last`` pad by repeating ``idx`` from the
    start, else truncate to ``total``; this rank gets ``idx[rank:total:R]``.

    Args:
        dataset: sized dataset.
        num_replicas: world size (default ``jax.process_count()``).
        rank: this replica (default ``jax.process_index()``).
        shuffle: permute per epoch.
        seed: base seed, identical on all replicas.
        drop_last: drop the tail instead of padding.
    """

    def __init__(
        self,
        dataset: Sized,
        num_replicas: int | None = None,
        rank: int | None = None,
        shuffle: bool = True,
        seed: int = 0,
        drop_last: bool = False,
    ) -> None:
        if num_replicas is None or rank is None:
            import jax  # lazy: only needed when the topology is not given

            if num_replicas is None:
                num_replicas = jax.process_count()
            if rank is None:
                rank = jax.process_index()
        if rank >= num_replicas or rank < 0:
            raise ValueError(
                f"Invalid rank {rank}, rank should be in the interval [0, {num_replicas - 1}]"
            )
        self.dataset = dataset
        self.num_replicas = num_replicas
        self.rank = rank
        self.epoch = 0
        self.drop_last = drop_last
        if self.drop_last and len(self.dataset) % self.num_replicas != 0:
            self.num_samples = math.ceil(
                (len(self.dataset) - self.num_replicas) / self.num_replicas
            )
        else:
            self.num_samples = math.ceil(len(self.dataset) / self.num_replicas)
        self.total_size = self.num_samples * self.num_replicas
        self.shuffle = shuffle
        self.seed = seed

    def __iter__(self) -> Iterator[int]:
        if self.shuffle:
            g = Generator().manual_seed(self.seed + self.epoch)
            indices = g.randperm(len(self.dataset)).tolist()
        else:
            indices = list(range(len(self.dataset)))
        if not self.drop_last:
            padding_size = self.total_size - len(indices)
            if padding_size <= len(indices):
                indices += indices[:padding_size]
            else:
                indices += (indices * math.ceil(padding_size / len(indices)))[
                    :padding_size
                ]
        else:
            indices = indices[: self.total_size]
        if len(indices) != self.total_size:
            raise AssertionError(
                f"Number of indices ({len(indices)}) does not match total_size ({self.total_size})"
            )
        indices = indices[self.rank : self.total_size : self.num_replicas]
        if len(indices) != self.num_samples:
            raise AssertionError(
                f"Number of subsampled indices ({len(indices)}) does not match "
                f"num_samples ({self.num_samples})"
            )
        return iter(indices)

    def __len__(self) -> int:
        return self.num_samples

    def set_epoch(self, epoch: int) -> None:
        """Set the epoch: with ``shuffle`` the order is ``randperm`` seeded ``seed + epoch``."""
        self.epoch = epoch
