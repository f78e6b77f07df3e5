"""Imported in the DataLoader's fork server only (its preload list): imports the main script there once.

A module of its own, not imported by the package: the server imports it
after ``jax_impl.data`` has finished importing, so the main script's
``from jax_impl.data import DataLoader`` finds the package complete.
"""

from jax_impl.data import _mp_context

_mp_context.prepare_main_in_forkserver()
