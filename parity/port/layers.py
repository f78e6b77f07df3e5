"""A ``torch.nn`` layer as the source of its ``jax_impl.nn`` namesake's constructor call.

``jax_impl.nn`` layers take torch's constructor arguments, and torch keeps
those arguments as attributes of the same names (``Conv2d.in_channels``,
``BatchNorm2d.momentum``, ``MaxPool2d.ceil_mode``, ...), so the call is read
off the torch module: every parameter of the ``jax_impl`` constructor gets
the torch attribute of its name. ``bias`` is the one argument torch turns
into a tensor (or ``None``); it becomes ``bias is not None``. Arguments
equal to the default are left out, so the source reads as a person writes it.

``MultiheadAttention`` and the transformer layers keep some arguments only
inside their submodules (``d_model`` as ``self_attn.embed_dim``, ``bias`` as
``in_proj_bias``, ``encoder_layer`` as ``layers[0]``); a reader per class
recovers those (``nn.Transformer``'s from the first layers of its encoder and
decoder).

A torch lazy layer (``LazyConv2d``, ...) ports once the model has run: its
first call turns it into its eager class, which ports as any layer.
"""

from __future__ import annotations

import inspect

import torch
import torch.nn.functional as TF
from torch.nn.modules.lazy import LazyModuleMixin

import jax_impl.nn as jnn
from parity.port.errors import FALLBACK, PortError
from parity.port.hooks import unparametrized_type

__all__ = ["layer_class", "layer_source"]

# Factory keywords: the twin's arrays get torch's dtypes when the weights are loaded.
_SKIPPED = {"self", "rngs", "device", "dtype"}


def layer_class(module: torch.nn.Module):
    """The ``jax_impl.nn`` class named like ``module``'s ``torch.nn`` class, or ``None``."""
    cls = getattr(jnn, unparametrized_type(module).__name__, None)
    return cls if isinstance(cls, type) and issubclass(cls, jnn.Module) else None


def _value(module: torch.nn.Module, name: str):
    value = getattr(module, name)
    if name == "bias" and (value is None or isinstance(value, torch.Tensor)):
        return value is not None
    return value


def _is_default(value, default) -> bool:
    # torch stores `stride=1` as (1, 1); jax_impl expands the default the same way, so both mean the default.
    if isinstance(value, tuple) and isinstance(default, int) and not isinstance(default, bool):
        return all(type(v) is int and v == default for v in value)
    return type(value) is type(default) and value == default


class _Source(str):
    """A constructor argument given as source text (a nested layer), written as it is."""


# Layers whose constructor arguments torch does not keep under their own names: each reader returns the
# arguments it knows, as values (or _Source), from the attributes and submodules torch does keep.
def _attention_arguments(module: torch.nn.Module, path: str) -> dict:
    return {
        "bias": module.in_proj_bias is not None,  # torch keeps `bias` only as in_proj_bias / out_proj.bias
        "add_bias_kv": module.bias_k is not None,
        # torch stores kdim=None as embed_dim; None is the default that means it
        "kdim": None if module.kdim == module.embed_dim else module.kdim,
        "vdim": None if module.vdim == module.embed_dim else module.vdim,
    }


def _activation_source(activation, path: str) -> str:
    # torch's layers turn activation="relu"/"gelu" into F.relu / F.gelu; a module stays a module.
    if activation is TF.relu or activation is TF.gelu:
        return activation.__name__
    if isinstance(activation, torch.nn.Module):
        return _Source(layer_source(activation, f"{path}.activation"))
    raise PortError(f"cannot port {path}: its activation {activation!r} is neither F.relu, F.gelu nor a "
                    f"torch.nn layer. Fallback: {FALLBACK}")


def _transformer_layer_arguments(module: torch.nn.Module, path: str) -> dict:
    return {
        "d_model": module.self_attn.embed_dim, "nhead": module.self_attn.num_heads,
        "dim_feedforward": module.linear1.out_features, "dropout": module.dropout.p,
        "activation": _activation_source(module.activation, path), "layer_norm_eps": module.norm1.eps,
        "batch_first": module.self_attn.batch_first, "bias": module.linear1.bias is not None,
    }


def _transformer_stack_arguments(module: torch.nn.Module, path: str) -> dict:
    # torch deep-copies encoder_layer / decoder_layer num_layers times; the copies' weights come from the state dict.
    layer = "encoder_layer" if isinstance(module, torch.nn.TransformerEncoder) else "decoder_layer"
    norm = module.norm
    return {layer: _Source(layer_source(module.layers[0], f"{path}.layers.0")),
            "norm": None if norm is None else _Source(layer_source(norm, f"{path}.norm"))}


def _built_stack_arguments(stack: torch.nn.Module, part: str, path: str) -> dict | None:
    """``nn.Transformer``'s arguments that build ``stack`` (its ``encoder`` or ``decoder``), or ``None`` when
    ``stack`` is not what ``Transformer`` builds from its arguments (it then ports as ``custom_encoder`` /
    ``custom_decoder``)."""
    stack_cls, layer_cls = ((torch.nn.TransformerEncoder, torch.nn.TransformerEncoderLayer) if part == "encoder"
                            else (torch.nn.TransformerDecoder, torch.nn.TransformerDecoderLayer))
    layers, norm = getattr(stack, "layers", ()), getattr(stack, "norm", None)
    if type(stack) is not stack_cls or not layers or any(type(layer) is not layer_cls for layer in layers):
        return None
    first = layers[0]
    d_model, bias = first.self_attn.embed_dim, first.linear1.bias is not None
    if not (type(norm) is torch.nn.LayerNorm and tuple(norm.normalized_shape) == (d_model,)
            and norm.eps == first.norm1.eps and norm.elementwise_affine and (norm.bias is not None) == bias):
        return None
    if part == "encoder" and not (stack.enable_nested_tensor and stack.mask_check):
        return None
    arguments = _transformer_layer_arguments(first, f"{path}.{part}.layers.0")
    arguments["norm_first"] = first.norm_first
    return arguments


def _transformer_arguments(module: torch.nn.Module, path: str) -> dict:
    # torch keeps d_model, nhead and batch_first; the layers' arguments live in the encoder's and decoder's layers.
    # A part Transformer would not build from the arguments the other part shows is passed as custom_*.
    encoder, decoder = (_built_stack_arguments(module.encoder, "encoder", path),
                        _built_stack_arguments(module.decoder, "decoder", path))
    if encoder is not None and decoder is not None and encoder != decoder:
        decoder = None
    arguments = dict(encoder or decoder or {})
    if arguments.get("activation") == "relu":
        del arguments["activation"]  # Transformer's default F.relu
    if encoder is not None:
        arguments["num_encoder_layers"] = len(module.encoder.layers)
    else:
        arguments["custom_encoder"] = _Source(layer_source(module.encoder, f"{path}.encoder"))
    if decoder is not None:
        arguments["num_decoder_layers"] = len(module.decoder.layers)
    else:
        arguments["custom_decoder"] = _Source(layer_source(module.decoder, f"{path}.decoder"))
    return arguments


_ARGUMENT_READERS = {
    "MultiheadAttention": _attention_arguments,
    "TransformerEncoderLayer": _transformer_layer_arguments,
    "TransformerDecoderLayer": _transformer_layer_arguments,
    "TransformerEncoder": _transformer_stack_arguments,
    "TransformerDecoder": _transformer_stack_arguments,
    "Transformer": _transformer_arguments,
}


def _literal(value) -> str:
    if isinstance(value, _Source):
        return str(value)
    if isinstance(value, torch.Size):
        value = tuple(value)
    if value is None or isinstance(value, (bool, int, float, str, tuple, list)):
        return repr(value)
    raise TypeError(type(value).__name__)


def layer_source(module: torch.nn.Module, path: str) -> str:
    """``nn.<Name>(arg, ..., key=value)`` that builds ``module``'s ``jax_impl.nn`` twin.

    Raises:
      PortError: ``jax_impl.nn`` has no such class, or a constructor argument
        cannot be read from the torch module.
    """
    name = unparametrized_type(module).__name__
    if isinstance(module, LazyModuleMixin) and module.has_uninitialized_params():
        # A materialised lazy layer is its cls_to_become (torch.nn.Conv2d, ...) and ports as that.
        becomes = f" (the layer then becomes a {module.cls_to_become.__name__})" if module.cls_to_become else ""
        raise PortError(f"cannot port {path or 'the model'} (torch.nn.{name}): its parameters are not materialised "
                        f"yet; call the torch model once on an example batch{becomes} and port it after that")
    cls = layer_class(module)
    if cls is None:
        raise PortError(f"cannot port {path or 'the model'} (torch.nn.{name}): jax_impl.nn has no {name}. "
                        f"Fallback: {FALLBACK}")
    known = _ARGUMENT_READERS[name](module, path) if name in _ARGUMENT_READERS else {}
    parts, named = [], False
    for param in inspect.signature(cls.__init__).parameters.values():
        if param.name in _SKIPPED or param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            continue
        required = param.default is param.empty
        if param.name in known:
            value = known[param.name]
        elif not hasattr(module, param.name):
            if required:
                raise PortError(f"cannot port {path} (torch.nn.{name}): jax_impl.nn.{name} needs {param.name!r}, "
                                f"which the torch module does not keep as an attribute. Fallback: {FALLBACK}")
            continue
        else:
            value = _value(module, param.name)
        if not required and not isinstance(value, _Source) and _is_default(value, param.default):
            continue
        try:
            text = _literal(value)
        except TypeError as error:
            raise PortError(f"cannot port {path} (torch.nn.{name}): its {param.name}={value!r} ({error}) is no "
                            f"constructor literal. Fallback: {FALLBACK}") from None
        named = named or not required or param.kind != param.POSITIONAL_OR_KEYWORD
        parts.append(f"{param.name}={text}" if named else text)
    return f"nn.{name}({', '.join(parts)})"
