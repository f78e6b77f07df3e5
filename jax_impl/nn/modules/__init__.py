"""torch.nn's layer classes as ``flax.nnx`` modules (see :mod:`jax_impl.nn`)."""

from jax_impl.nn.modules.activation import (
    CELU,
    ELU,
    GELU,
    GLU,
    SELU,
    Hardshrink,
    Hardsigmoid,
    Hardswish,
    Hardtanh,
    LeakyReLU,
    LogSigmoid,
    LogSoftmax,
    Mish,
    PReLU,
    ReLU,
    ReLU6,
    Sigmoid,
    SiLU,
    Softmax,
    Softmax2d,
    Softmin,
    Softplus,
    Softshrink,
    Softsign,
    Tanh,
    Tanhshrink,
    Threshold,
)
from jax_impl.nn.modules.attention import MultiheadAttention
from jax_impl.nn.modules.batchnorm import BatchNorm1d, BatchNorm2d, BatchNorm3d, SyncBatchNorm
from jax_impl.nn.modules.container import ModuleDict, ModuleList, Sequential
from jax_impl.nn.modules.conv import (
    Conv1d,
    Conv2d,
    Conv3d,
    ConvTranspose1d,
    ConvTranspose2d,
    ConvTranspose3d,
    LazyConv1d,
    LazyConv2d,
    LazyConv3d,
    LazyConvTranspose1d,
    LazyConvTranspose2d,
    LazyConvTranspose3d,
)
from jax_impl.nn.modules.dropout import Dropout, Dropout1d, Dropout2d, Dropout3d
from jax_impl.nn.modules.flatten import Flatten, Unflatten
from jax_impl.nn.modules.instancenorm import InstanceNorm1d, InstanceNorm2d, InstanceNorm3d
from jax_impl.nn.modules.linear import Bilinear, Identity, Linear
from jax_impl.nn.modules.lazy import LazyModuleMixin, UninitializedParameter
from jax_impl.nn.modules.local_response_norm import LocalResponseNorm
from jax_impl.nn.modules.loss import (
    BCELoss,
    BCEWithLogitsLoss,
    CosineEmbeddingLoss,
    CrossEntropyLoss,
    CTCLoss,
    GaussianNLLLoss,
    HingeEmbeddingLoss,
    HuberLoss,
    KLDivLoss,
    L1Loss,
    LinearCrossEntropyLoss,
    MarginRankingLoss,
    MSELoss,
    MultiLabelMarginLoss,
    MultiLabelSoftMarginLoss,
    MultiMarginLoss,
    NLLLoss,
    PoissonNLLLoss,
    SmoothL1Loss,
    SoftMarginLoss,
)
from jax_impl.nn.modules.module import Buffer, Module
from jax_impl.nn.modules.normalization import GroupNorm, LayerNorm, RMSNorm
from jax_impl.nn.modules.rnn import GRU, LSTM, RNN, GRUCell, LSTMCell, RNNBase, RNNCell, RNNCellBase
from jax_impl.nn.modules.padding import (
    CircularPad1d,
    CircularPad2d,
    CircularPad3d,
    ConstantPad1d,
    ConstantPad2d,
    ConstantPad3d,
    ReflectionPad1d,
    ReflectionPad2d,
    ReflectionPad3d,
    ReplicationPad1d,
    ReplicationPad2d,
    ReplicationPad3d,
    ZeroPad1d,
    ZeroPad2d,
    ZeroPad3d,
)
from jax_impl.nn.modules.pixelshuffle import PixelShuffle, PixelUnshuffle
from jax_impl.nn.modules.pooling import (
    AdaptiveAvgPool1d,
    AdaptiveAvgPool2d,
    AdaptiveAvgPool3d,
    AdaptiveMaxPool1d,
    AdaptiveMaxPool2d,
    AdaptiveMaxPool3d,
    AvgPool1d,
    AvgPool2d,
    AvgPool3d,
    FractionalMaxPool2d,
    FractionalMaxPool3d,
    LPPool1d,
    LPPool2d,
    LPPool3d,
    MaxPool1d,
    MaxPool2d,
    MaxPool3d,
    MaxUnpool1d,
    MaxUnpool2d,
    MaxUnpool3d,
)
from jax_impl.nn.modules.sparse import Embedding
from jax_impl.nn.modules.upsampling import Upsample, UpsamplingBilinear2d, UpsamplingNearest2d
from jax_impl.nn.modules.transformer import (
    Transformer,
    TransformerDecoder,
    TransformerDecoderLayer,
    TransformerEncoder,
    TransformerEncoderLayer,
)

__all__ = [
    "AdaptiveAvgPool1d", "AdaptiveAvgPool2d", "AdaptiveAvgPool3d",
    "AdaptiveMaxPool1d", "AdaptiveMaxPool2d", "AdaptiveMaxPool3d",
    "AvgPool1d", "AvgPool2d", "AvgPool3d",
    "BCELoss", "BCEWithLogitsLoss", "BatchNorm1d", "BatchNorm2d", "BatchNorm3d", "Buffer", "CELU",
    "Conv1d", "Conv2d", "Conv3d", "ConvTranspose1d", "ConvTranspose2d", "ConvTranspose3d",
    "LazyConv1d", "LazyConv2d", "LazyConv3d", "LazyConvTranspose1d", "LazyConvTranspose2d", "LazyConvTranspose3d",
    "LazyModuleMixin", "UninitializedParameter",
    "CrossEntropyLoss", "Dropout", "Dropout1d", "Dropout2d", "Dropout3d", "ELU", "Flatten", "GELU",
    "Hardsigmoid", "Hardswish", "Hardtanh", "HuberLoss", "Identity", "KLDivLoss", "L1Loss", "LeakyReLU",
    "Linear", "LogSigmoid", "LogSoftmax", "MSELoss", "MaxPool1d", "MaxPool2d", "MaxPool3d", "Mish", "Module",
    "ModuleDict", "ModuleList", "NLLLoss", "PReLU", "ReLU", "ReLU6", "SELU", "Sequential", "SiLU", "Sigmoid",
    "SmoothL1Loss",
    "Softmax", "Softplus", "Softsign", "SyncBatchNorm", "Tanh", "Tanhshrink", "Threshold", "Unflatten",
    "Embedding", "GroupNorm", "LayerNorm", "MultiheadAttention", "RMSNorm",
    "Transformer", "TransformerDecoder", "TransformerDecoderLayer", "TransformerEncoder", "TransformerEncoderLayer",
    "GRU", "GRUCell", "LSTM", "LSTMCell", "RNN", "RNNBase", "RNNCell", "RNNCellBase",
    "CircularPad1d", "CircularPad2d", "CircularPad3d", "ConstantPad1d", "ConstantPad2d", "ConstantPad3d",
    "ReflectionPad1d", "ReflectionPad2d", "ReflectionPad3d", "ReplicationPad1d", "ReplicationPad2d",
    "ReplicationPad3d", "ZeroPad1d", "ZeroPad2d", "ZeroPad3d", "PixelShuffle", "PixelUnshuffle",
    "InstanceNorm1d", "InstanceNorm2d", "InstanceNorm3d",
    "GLU", "Hardshrink", "Softmax2d", "Softmin", "Softshrink",
    "Upsample", "UpsamplingBilinear2d", "UpsamplingNearest2d",
    "CosineEmbeddingLoss", "HingeEmbeddingLoss", "MarginRankingLoss", "MultiLabelMarginLoss",
    "MultiLabelSoftMarginLoss", "MultiMarginLoss", "SoftMarginLoss",
    "CTCLoss", "GaussianNLLLoss", "LinearCrossEntropyLoss", "PoissonNLLLoss",
    "Bilinear", "FractionalMaxPool2d", "FractionalMaxPool3d", "LPPool1d", "LPPool2d", "LPPool3d", "LocalResponseNorm",
    "MaxUnpool1d", "MaxUnpool2d", "MaxUnpool3d",
]
