"""The geometry arguments of torch's convolutions and pools, resolved and checked as aten does.

Shared by :mod:`jax_impl.nn.functional` and the channels-last routes, which must accept and refuse
exactly the same arguments.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["ntuple", "pool_args", "pool_output_size"]


def ntuple(value, nd: int, name: str) -> tuple[int, ...]:
    """``value`` as ``nd`` ints, as torch's ``_ntuple`` expands an int or a one-element sequence."""
    if isinstance(value, Sequence):
        value = tuple(int(v) for v in value)
        if len(value) == 1:
            value = value * nd
        if len(value) != nd:
            raise ValueError(f"{name} must be an int or a tuple of {nd} ints, got {value}")
        return value
    return (int(value),) * nd


def pool_output_size(length, k, s, p, d, ceil_mode):
    """aten/src/ATen/native/Pool.h ``pooling_output_shape_pad_lr``."""
    numerator = length + 2 * p - d * (k - 1) - 1 + (s - 1 if ceil_mode else 0)
    out = numerator // s + 1
    # In ceil mode the last window must start inside the input or the left padding.
    if ceil_mode and (out - 1) * s >= length + p:
        out -= 1
    if out < 1:
        raise ValueError(f"Output size is too small (computed {out} from input size {length})")
    return out


def pool_args(nd, x, kernel_size, stride, padding, dilation, fn):
    """``(kernel, stride, padding, dilation)`` of a pool as torch resolves them, with torch's checks and messages."""
    kernel = ntuple(kernel_size, nd, "kernel_size")
    # torch: stride=None (or an empty list) means stride = kernel_size.
    stride = kernel if stride is None or stride == [] or stride == () else ntuple(stride, nd, "stride")
    padding = ntuple(padding, nd, "padding")
    dilation = ntuple(dilation, nd, "dilation")
    for k, p, d in zip(kernel, padding, dilation):
        if fn == "max_pool1d" and p > k // 2:
            # aten MaxPooling.cpp checks max_pool1d separately, ignoring dilation.
            raise ValueError(
                f"max_pool1d() padding should be at most half of kernel size, but got padding={p} and kernel_size={k}"
            )
        if p > ((k - 1) * d + 1) // 2:
            raise ValueError(
                "pad should be at most half of effective kernel size, but got "
                f"pad={p}, kernel_size={k} and dilation={d}"
            )
    # Then torch's 2d/3d max pools check padding against the undilated kernel, with their own messages.
    if fn in ("max_pool2d", "max_pool3d") and any(p > k // 2 for k, p in zip(kernel, padding)):
        if fn == "max_pool2d":
            (kh, kw), (ph, pw) = kernel, padding
            detail = f"padW = {pw}, padH = {ph}, kW = {kw}, kH = {kh}"
        else:
            (kt, kh, kw), (pt, ph, pw) = kernel, padding
            detail = f"kT: {kt} kW: {kw} kH: {kh} padT: {pt} padW: {pw} padH: {ph}"
        raise ValueError(f"pad should be smaller than or equal to half of kernel size, but got {detail}")
    return kernel, stride, padding, dilation
