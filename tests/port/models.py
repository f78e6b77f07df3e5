"""Torch models written in the styles of well-known architectures (none is the project's own)."""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F


class MnistNet(nn.Module):
    """pytorch/examples' MNIST network, narrowed: functional relu / max_pool2d / log_softmax, two dropouts."""

    def __init__(self, side: int = 12) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, 4, 3, 1)
        self.conv2 = nn.Conv2d(4, 8, 3, 1)
        self.dropout1 = nn.Dropout(0.25)
        self.dropout2 = nn.Dropout(0.5)
        self.fc1 = nn.Linear(8 * ((side - 4) // 2) ** 2, 16)
        self.fc2 = nn.Linear(16, 10)

    def forward(self, x):
        x = self.conv1(x)
        x = F.relu(x)
        x = self.conv2(x)
        x = F.relu(x)
        x = F.max_pool2d(x, 2)
        x = self.dropout1(x)
        x = torch.flatten(x, 1)
        x = self.fc1(x)
        x = F.relu(x)
        x = self.dropout2(x)
        x = F.dropout(x, 0.3, training=self.training)
        x = self.fc2(x)
        return F.log_softmax(x, dim=1)


class VGGStyle(nn.Module):
    """VGG: nn.Sequential conv blocks, torch.flatten, a Sequential classifier with Dropout."""

    def __init__(self, widths=(4, 8), num_classes: int = 5) -> None:
        super().__init__()
        layers, channels = [], 3
        for width in widths:
            layers += [nn.Conv2d(channels, width, 3, padding=1), nn.BatchNorm2d(width), nn.ReLU(inplace=True),
                       nn.MaxPool2d(2, 2)]
            channels = width
        self.features = nn.Sequential(*layers)
        self.avgpool = nn.AdaptiveAvgPool2d((2, 2))
        self.classifier = nn.Sequential(nn.Linear(channels * 4, 16), nn.ReLU(True), nn.Dropout(),
                                        nn.Linear(16, num_classes))

    def forward(self, x):
        x = self.features(x)
        x = self.avgpool(x)
        x = torch.flatten(x, 1)
        return self.classifier(x)


class InvertedResidual(nn.Module):
    """MobileNetV2/V3 block: 1x1 expand, depthwise 3x3 (groups = channels), 1x1 project, residual add."""

    def __init__(self, channels: int, expand: int, stride: int = 1) -> None:
        super().__init__()
        hidden = channels * expand
        self.use_res = stride == 1
        self.block = nn.Sequential(
            nn.Conv2d(channels, hidden, 1, bias=False), nn.BatchNorm2d(hidden), nn.Hardswish(),
            nn.Conv2d(hidden, hidden, 3, stride, 1, groups=hidden, bias=False), nn.BatchNorm2d(hidden),
            nn.Hardswish(),
            nn.Conv2d(hidden, channels, 1, bias=False), nn.BatchNorm2d(channels),
        )

    def forward(self, x):
        out = self.block(x)
        if self.use_res:
            return x + out
        return out


class MobileNetStyle(nn.Module):
    """MobileNetV3-style: stem, inverted residuals with grouped convs, AdaptiveAvgPool2d, Hardswish head."""

    def __init__(self, num_classes: int = 4) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 8, 3, 2, 1, bias=False), nn.BatchNorm2d(8), nn.Hardswish())
        self.blocks = nn.Sequential(InvertedResidual(8, 2), InvertedResidual(8, 2, stride=2))
        self.grouped = nn.Conv2d(8, 8, 3, padding=1, groups=2)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.head = nn.Sequential(nn.Linear(8, 12), nn.Hardswish(), nn.Linear(12, num_classes))

    def forward(self, x):
        x = self.blocks(self.stem(x))
        x = x + self.grouped(x)
        x = self.pool(x).flatten(1)
        return self.head(x)


class DenseLayer(nn.Module):
    def __init__(self, channels: int, growth: int) -> None:
        super().__init__()
        self.norm1 = nn.BatchNorm2d(channels)
        self.conv1 = nn.Conv2d(channels, growth, 3, padding=1, bias=False)

    def forward(self, features):
        x = torch.cat(features, 1)
        return self.conv1(F.relu(self.norm1(x)))


class DenseBlockNet(nn.Module):
    """DenseNet: a block whose layers read torch.cat of every earlier output (a ModuleList), a transition."""

    def __init__(self, channels: int = 4, growth: int = 3, layers: int = 3) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, channels, 3, padding=1)
        self.layers = nn.ModuleList(DenseLayer(channels + i * growth, growth) for i in range(layers))
        out = channels + layers * growth
        self.transition = nn.Sequential(nn.BatchNorm2d(out), nn.ReLU(), nn.Conv2d(out, 4, 1), nn.AvgPool2d(2))

    def forward(self, x):
        features = [self.stem(x)]
        for layer in self.layers:
            features.append(layer(features))
        return self.transition(torch.cat(features, dim=1))


class UNetStyle(nn.Module):
    """U-Net: MaxPool2d down, ConvTranspose2d up, torch.cat of the skip connections."""

    def __init__(self, base: int = 4) -> None:
        super().__init__()

        def double(cin, cout):
            return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1), nn.BatchNorm2d(cout), nn.ReLU(inplace=True),
                                 nn.Conv2d(cout, cout, 3, padding=1), nn.ReLU(inplace=True))

        self.down1 = double(1, base)
        self.down2 = double(base, base * 2)
        self.pool = nn.MaxPool2d(2)
        self.bottom = double(base * 2, base * 4)
        self.up2 = nn.ConvTranspose2d(base * 4, base * 2, 2, stride=2)
        self.dec2 = double(base * 4, base * 2)
        self.up1 = nn.ConvTranspose2d(base * 2, base, 2, stride=2)
        self.dec1 = double(base * 2, base)
        self.out = nn.Conv2d(base, 2, 1)

    def forward(self, x):
        d1 = self.down1(x)
        d2 = self.down2(self.pool(d1))
        b = self.bottom(self.pool(d2))
        u2 = self.dec2(torch.cat([self.up2(b), d2], dim=1))
        u1 = self.dec1(torch.cat([self.up1(u2), d1], dim=1))
        return self.out(u1)


class TensorOps(nn.Module):
    """A functional-style forward over tensor methods: view/size, permute, transpose, chunk, split, mean/sum,
    indexing, matmul, softmax, stack, unsqueeze/squeeze, a parameter read directly, a registered buffer."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(6, 6)
        self.scale = nn.Parameter(torch.linspace(0.5, 1.5, 6))
        self.register_buffer("shift", torch.linspace(-1.0, 1.0, 6))

    def forward(self, x):
        n = x.size(0)
        h = x.view(n, -1, 6)
        h = self.proj(h) * self.scale + self.shift
        a, b = h.chunk(2, dim=2)
        c, d, e = torch.split(h, [1, 2, 3], dim=-1)
        attn = torch.softmax(a @ b.transpose(1, 2) / 3 ** 0.5, dim=-1)
        mixed = torch.matmul(attn, d.sum(-1, keepdim=True) + e + c)
        pooled = mixed.mean(dim=1)
        stacked = torch.stack([pooled, -pooled], dim=1)
        out = stacked.permute(0, 2, 1).reshape(n, -1)
        out = out + h[:, 0, ::2].sum(1).unsqueeze(1) - x.shape[1] * 0.01
        return out.unsqueeze(1).squeeze(1), F.log_softmax(out, 1)


class Untraceable(nn.Module):
    """Data-dependent control flow: fx cannot trace it."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        y = self.fc(x)
        if y.sum() > 0:
            return y
        return -y


class CausalSelfAttention(nn.Module):
    """A GPT block's attention written with functional calls: F.layer_norm, F.scaled_dot_product_attention."""

    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.ln_weight = nn.Parameter(torch.linspace(0.5, 1.5, dim))
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):
        n, s, d = x.shape
        h = F.layer_norm(x, (d,), self.ln_weight, None, 1e-5)
        q, k, v = self.qkv(h).split(d, dim=2)
        q, k, v = (t.view(n, s, self.heads, d // self.heads).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return x + self.proj(y.transpose(1, 2).reshape(n, s, d))


class TinyGPT(nn.Module):
    """Token and position embeddings (torch.arange on the input's device), a functional causal-attention
    block, a TransformerEncoderLayer (pre-norm, GELU, dropout, causal mask buffer), LayerNorm, Linear head."""

    def __init__(self, vocab: int = 11, dim: int = 8, heads: int = 2, length: int = 5) -> None:
        super().__init__()
        self.tok = nn.Embedding(vocab, dim)
        self.pos = nn.Embedding(length, dim)
        self.attn = CausalSelfAttention(dim, heads)
        self.block = nn.TransformerEncoderLayer(dim, heads, dim_feedforward=16, dropout=0.1, activation="gelu",
                                                batch_first=True, norm_first=True)
        self.register_buffer("mask", torch.triu(torch.full((length, length), float("-inf")), diagonal=1))
        self.ln_f = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab, bias=False)

    def forward(self, idx):
        s = idx.size(1)
        x = self.tok(idx) + self.pos(torch.arange(0, s, dtype=torch.long, device=idx.device))
        x = self.attn(x)
        x = self.block(x, src_mask=self.mask[:s, :s])
        return F.log_softmax(self.head(self.ln_f(x)), dim=-1)


class TinyViT(nn.Module):
    """Patch embedding (Conv2d, flatten, transpose), class token (torch.cat), a 2-layer TransformerEncoder
    (post-norm, ReLU, dropout, final LayerNorm), MultiheadAttention pooling, GroupNorm/RMSNorm, F.gelu head."""

    def __init__(self, dim: int = 8, heads: int = 2, patch: int = 4, classes: int = 3) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, dim, patch, stride=patch)
        self.stem_norm = nn.GroupNorm(2, dim)
        self.cls = nn.Parameter(torch.randn(1, 1, dim) * 0.1)
        layer = nn.TransformerEncoderLayer(dim, heads, dim_feedforward=12, dropout=0.1, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, 2, norm=nn.LayerNorm(dim), enable_nested_tensor=False)
        self.pool = nn.MultiheadAttention(dim, heads, kdim=6, vdim=5, add_bias_kv=True, batch_first=True)
        self.k_proj = nn.Linear(dim, 6)
        self.v_proj = nn.Linear(dim, 5)
        self.norm = nn.RMSNorm(dim)
        self.head = nn.Linear(dim, classes)

    def forward(self, x):
        x = self.stem_norm(self.stem(x)).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls.expand(x.size(0), -1, -1), x], dim=1)
        x = self.encoder(x)
        pooled, _ = self.pool(x[:, :1], self.k_proj(x), self.v_proj(x), need_weights=False)
        return self.head(F.gelu(self.norm(pooled[:, 0]), approximate="tanh"))


class ForwardForwardLayer(nn.Linear):
    """The official forward-forward example's ``Layer``: a ``train`` that fits the layer, with another
    signature than ``nn.Module.train(mode)``."""

    def __init__(self, in_features: int, out_features: int) -> None:
        super().__init__(in_features, out_features)
        self.relu = nn.ReLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.relu(super().forward(x))

    def train(self, x_pos: torch.Tensor, x_neg: torch.Tensor) -> None:  # noqa: D102 - the example's own
        raise AssertionError("parity.port must not call a model's own train()")


class ForwardForwardNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.ModuleList([ForwardForwardLayer(6, 5), ForwardForwardLayer(5, 4)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x)
        return x


def failing_factory() -> nn.Module:
    raise RuntimeError("CUDA is required")


class VAE(torch.nn.Module):
    """The official ``examples/vae`` model (784 -> 400 -> 20 at a tiny size), as written: ``torch.randn_like``
    in the reparameterisation draws noise in train and eval mode alike."""

    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(12, 8)
        self.fc21 = torch.nn.Linear(8, 3)
        self.fc22 = torch.nn.Linear(8, 3)
        self.fc3 = torch.nn.Linear(3, 8)
        self.fc4 = torch.nn.Linear(8, 12)

    def encode(self, x):
        h1 = torch.nn.functional.relu(self.fc1(x))
        return self.fc21(h1), self.fc22(h1)

    def reparameterize(self, mu, logvar):
        std = torch.exp(0.5 * logvar)
        eps = torch.randn_like(std)
        return mu + eps * std

    def decode(self, z):
        h3 = torch.nn.functional.relu(self.fc3(z))
        return torch.sigmoid(self.fc4(h3))

    def forward(self, x):
        mu, logvar = self.encode(x.view(-1, 12))
        z = self.reparameterize(mu, logvar)
        return self.decode(z), mu, logvar


class NoisyDenoiser(torch.nn.Module):
    """Draws of every mapped kind inside ``forward``: timesteps, uniforms, a normal with tensor mean and std,
    Bernoulli noise and fresh latents, with sizes read from the input and written as numbers."""

    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(6, 6)

    def forward(self, x):
        t = torch.randint(0, 10, (x.shape[0],))
        u = torch.rand(4, 1)
        n = torch.normal(x * 0.3, x.abs() + 0.5)
        keep = torch.bernoulli(torch.sigmoid(x))
        z = torch.randn(x.size(0), 6) + torch.zeros(4, 6)
        return self.fc(n * keep + u * z) + t[:, None]


class TiedClassifier(nn.Module):
    """A classifier on 8x8 digits with a weight shared by two layers and a layer applied through two names."""

    def __init__(self, hidden: int = 16) -> None:
        super().__init__()
        self.inp = nn.Linear(64, hidden)
        self.mid = nn.Linear(hidden, hidden)
        self.mid2 = nn.Linear(hidden, hidden)
        self.mid2.weight = self.mid.weight
        self.blocks = nn.ModuleList([nn.Linear(hidden, hidden)])
        self.blocks.append(self.blocks[0])
        self.out = nn.Linear(hidden, 10)

    def forward(self, x):
        x = F.relu(self.inp(torch.flatten(x, 1)))
        x = F.relu(self.mid2(F.relu(self.mid(x))))
        for block in self.blocks:
            x = F.relu(block(x))
        return self.out(x)
