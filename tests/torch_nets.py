"""Small PyTorch networks the from_torch tests port, written with torch.nn as their users write them."""
from __future__ import annotations

import sys
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))
import resnet  # noqa: E402  (examples/resnet.py: the network the demo ports)


class TransformerClassifier(nn.Module):
    """nn.TransformerEncoderLayer and a classifier head over the mean of the sequence."""

    def __init__(self, d_model=32, heads=4, classes=5, dropout=0.0):
        super().__init__()
        self.encoder = nn.TransformerEncoderLayer(d_model, heads, dim_feedforward=64, dropout=dropout,
                                                  batch_first=True)
        self.head = nn.Linear(d_model, classes)

    def forward(self, x):
        return self.head(self.encoder(x).mean(1))


class ConvNet(nn.Module):
    """Conv / BatchNorm / ReLU / MaxPool twice, then a linear layer."""

    def __init__(self, classes=5):
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8)
        self.conv2, self.bn2 = nn.Conv2d(8, 16, 3, padding=1), nn.BatchNorm2d(16)
        self.fc = nn.Linear(16 * 2 * 2, classes)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 2)
        x = F.max_pool2d(F.relu(self.bn2(self.conv2(x))), 2)
        return self.fc(torch.flatten(x, 1))


def ResNet(classes=5, width=8):
    """torchvision's ResNet layout (examples/resnet.py), two narrow stages of one block each."""
    return resnet.ResNet((1, 1), classes, width)


class DictMLP(nn.Module):
    """An MLP returning a dict: logits and the hidden features."""

    def __init__(self, d_in=12, hidden=16, classes=5):
        super().__init__()
        self.layers = nn.Sequential(nn.Linear(d_in, hidden), nn.GELU(), nn.Linear(hidden, hidden), nn.Tanh())
        self.out = nn.Linear(hidden, classes)

    def forward(self, x):
        features = self.layers(x)
        return {"logits": self.out(features), "features": features}


class ContainerNet(nn.Module):
    """Submodules and parameters whose names are not Python identifiers: nn.ParameterList ("0", "1"),
    nn.ParameterDict and nn.ModuleDict keys with a dash or a leading digit."""

    def __init__(self, d_in=12, classes=5):
        super().__init__()
        self.scales = nn.ParameterList([nn.Parameter(torch.rand(d_in) + 0.5) for _ in range(2)])
        self.shift = nn.ParameterDict({"per-feature": nn.Parameter(torch.zeros(d_in)), "out-bias": nn.Parameter(
            torch.zeros(classes))})
        self.blocks = nn.ModuleDict({"in-proj": nn.Linear(d_in, d_in), "2nd": nn.Linear(d_in, classes)})

    def forward(self, x):
        x = x * self.scales[0] * self.scales[1] + self.shift["per-feature"]
        x = torch.relu(self.blocks["in-proj"](x))
        return self.blocks["2nd"](x) + self.shift["out-bias"]


class LSTMNet(nn.Module):
    """An LSTM over the sequence and a classifier on its last step: torch.export unbinds the initial state over
    its size-1 layer dimension, a list of one tensor. `learned_state`: the initial state is computed from the first
    step (zeros, torch's default, would be a tensor made from the batch size alone)."""

    def __init__(self, d_in=12, hidden=16, classes=5, learned_state=False):
        super().__init__()
        self.lstm = nn.LSTM(d_in, hidden, batch_first=True)
        self.init = nn.Linear(d_in, hidden) if learned_state else None
        self.out = nn.Linear(hidden, classes)

    def forward(self, x):
        if self.init is None:
            y, _ = self.lstm(x)
        else:
            h0 = torch.tanh(self.init(x[:, 0])).unsqueeze(0)
            y, _ = self.lstm(x, (h0, torch.zeros_like(h0)))
        return self.out(y[:, -1])


class ConcatNet(nn.Module):
    """Two branches joined with torch.cat."""

    def __init__(self, d_in=12, classes=5):
        super().__init__()
        self.a, self.b = nn.Linear(d_in, 8), nn.Linear(d_in, 6)
        self.out = nn.Linear(14, classes)

    def forward(self, x):
        return self.out(torch.cat([torch.relu(self.a(x)), torch.sigmoid(self.b(x))], dim=1))


class AttentionNet(nn.Module):
    """Self-attention written with F.scaled_dot_product_attention (dropout_p=0), causal."""

    def __init__(self, d_model=16, classes=5):
        super().__init__()
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.out = nn.Linear(d_model, classes)

    def forward(self, x):
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        return self.out(F.scaled_dot_product_attention(q, k, v, is_causal=True).mean(1))


class MaskedAttentionNet(nn.Module):
    """nn.MultiheadAttention with a key padding mask, returning its averaged weights too: the backward divides by
    a count that depends on the batch size (a size as a scalar argument)."""

    def __init__(self, d_in=12, d_model=16, classes=5):
        super().__init__()
        self.proj = nn.Linear(d_in, d_model)
        self.attention = nn.MultiheadAttention(d_model, 4, batch_first=True)
        self.out = nn.Linear(d_model, classes)

    def forward(self, x):
        h = self.proj(x)
        padding = x[:, :, 0] > 1.5
        o, weights = self.attention(h, h, h, key_padding_mask=padding, need_weights=True)
        return self.out(o.mean(1) + weights.mean())


class TiedEmbeddingNet(nn.Module):
    """Token embeddings tied to the output projection, and a layer norm without weights: its backward leaves the
    weight gradients uncomputed (None outputs)."""

    def __init__(self, vocab=20, d_model=16, classes=5):
        super().__init__()
        self.embedding = nn.Embedding(vocab, d_model, padding_idx=0)
        self.norm = nn.LayerNorm(d_model, elementwise_affine=False)
        self.project = nn.Linear(d_model, vocab, bias=False)
        self.project.weight = self.embedding.weight
        self.out = nn.Linear(vocab, classes)

    def forward(self, x):
        tokens = (x.abs() * 7).long() % self.embedding.num_embeddings
        return self.out(self.project(self.norm(self.embedding(tokens).mean(2))).mean(1))


class MemoryNet(nn.Module):
    """A learned memory broadcast over the batch (`expand(x.shape[0], ...)`): the size of a node whose only tensor
    input is a parameter comes from the module's input."""

    def __init__(self, d_in=12, slots=3, classes=5):
        super().__init__()
        self.memory = nn.Parameter(torch.randn(1, slots, d_in) * 0.5)
        self.out = nn.Linear(d_in, classes)

    def forward(self, x):
        memory = self.memory.expand(x.shape[0], -1, -1)
        scores = torch.softmax(x @ memory.transpose(1, 2), dim=-1)
        return self.out((scores @ memory).mean(1))


class TokenNet(nn.Module):
    """Token ids in (int64), embeddings, a convolution with BatchNorm, a one-hot feature joined with cat, and a split
    into two halves (an operator of two outputs)."""

    def __init__(self, vocab=30, d_model=16, length=6, classes=4):
        super().__init__()
        self.embedding = nn.Embedding(vocab, d_model)
        self.conv = nn.Conv1d(d_model, d_model, 3, padding=1)
        self.norm = nn.BatchNorm1d(d_model)
        self.out = nn.Linear(d_model * length // 2, classes)

    def forward(self, ids):
        h = self.norm(self.conv(self.embedding(ids).transpose(1, 2)))
        marks = F.one_hot(ids % 4, 4).float().sum(2, keepdim=True).transpose(1, 2).expand(-1, h.shape[1], -1)
        first, second = torch.split(h + marks, [ids.shape[1] // 2] * 2, dim=2)
        return self.out((first * second).reshape(ids.shape[0], -1))


class TinyViT(nn.Module):
    """A vision transformer: patches from a strided convolution, a class token expanded to the batch, learned
    positions, two pre-norm nn.TransformerEncoder layers, the class token classified."""

    def __init__(self, d_model=16, classes=5):
        super().__init__()
        self.patch = nn.Conv2d(3, d_model, 4, stride=4)
        self.cls = nn.Parameter(torch.zeros(1, 1, d_model))
        self.pos = nn.Parameter(torch.randn(1, 5, d_model) * 0.02)
        layer = nn.TransformerEncoderLayer(d_model, 2, 2 * d_model, dropout=0.0, batch_first=True, norm_first=True)
        self.encoder = nn.TransformerEncoder(layer, 2)
        self.head = nn.Linear(d_model, classes)

    def forward(self, x):
        patches = self.patch(x).flatten(2).transpose(1, 2)
        h = torch.cat([self.cls.expand(x.shape[0], -1, -1), patches], 1) + self.pos
        return self.head(self.encoder(h)[:, 0])


class TinyGPT(nn.Module):
    """A decoder block as GPT writes it: token and position embeddings, a causal mask buffer applied with
    masked_fill, heads split by view/transpose, the output projection tied to the token embedding."""

    def __init__(self, vocab=20, d_model=16, length=6, classes=5):
        super().__init__()
        self.classes = classes
        self.tokens = nn.Embedding(vocab, d_model)
        self.positions = nn.Embedding(length, d_model)
        self.norm = nn.LayerNorm(d_model)
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)
        self.mlp = nn.Sequential(nn.Linear(d_model, 4 * d_model), nn.GELU(), nn.Linear(4 * d_model, d_model))
        self.final_norm = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab, bias=False)
        self.head.weight = self.tokens.weight
        self.register_buffer("mask", torch.tril(torch.ones(length, length)).view(1, 1, length, length))

    def forward(self, x):
        ids = (x.abs() * 7).long() % self.tokens.num_embeddings
        batch, length = ids.shape
        d = self.tokens.embedding_dim
        h = self.tokens(ids) + self.positions(torch.arange(length))
        q, k, v = self.qkv(self.norm(h)).split(d, 2)
        q, k, v = [t.view(batch, length, 2, d // 2).transpose(1, 2) for t in (q, k, v)]
        scores = (q @ k.transpose(-2, -1)) / (d // 2) ** 0.5
        scores = scores.masked_fill(self.mask[:, :, :length, :length] == 0, float("-inf")).softmax(-1)
        h = h + self.proj((scores @ v).transpose(1, 2).contiguous().view(batch, length, d))
        h = h + self.mlp(h)
        return self.head(self.final_norm(h))[:, -1, :self.classes]


class NormalizedNet(nn.Module):
    """Layers under torch.nn.utils.parametrizations (weight_norm, spectral_norm): their ParametrizationList holds
    parameters (original0, original1) beside numbered children, and spectral_norm updates buffers in training."""

    def __init__(self, d_in=12, hidden=16, classes=5):
        super().__init__()
        self.a = nn.utils.parametrizations.weight_norm(nn.Linear(d_in, hidden))
        self.b = nn.utils.parametrizations.spectral_norm(nn.Linear(hidden, classes))

    def forward(self, x):
        return self.b(F.silu(self.a(x.mean(1))))


class LookupNet(nn.Module):
    """Integer indexing as transformers models write it: rows of a table picked by the input's token ids
    (Whisper's weight[position_ids]) and a bias table indexed by a buffer of relative positions (Swin)."""

    def __init__(self, vocab=30, d=8, seq=6, classes=4):
        super().__init__()
        self.table = nn.Parameter(torch.randn(vocab, d))
        self.bias_table = nn.Parameter(torch.randn(2 * seq - 1, 1))
        positions = torch.arange(seq)
        self.register_buffer("relative", positions[:, None] - positions[None, :] + seq - 1)
        self.out = nn.Linear(d, classes)

    def forward(self, ids):
        h = self.table[ids]
        scores = h @ h.transpose(1, 2) + self.bias_table[self.relative].squeeze(-1)
        return self.out((scores.softmax(-1) @ h).mean(1))


class GroupedAttentionNet(nn.Module):
    """F.scaled_dot_product_attention as Llama calls it: 4 query heads sharing 2 key/value heads (enable_gqa), a
    padding mask, an explicit scale."""

    def __init__(self, d_in=12, heads=4, kv_heads=2, head_dim=4, classes=5):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, head_dim
        self.q = nn.Linear(d_in, heads * head_dim)
        self.kv = nn.Linear(d_in, 2 * kv_heads * head_dim)
        self.out = nn.Linear(heads * head_dim, classes)

    def forward(self, x):
        b, s, _ = x.shape
        q = self.q(x).view(b, s, self.heads, self.head_dim).transpose(1, 2)
        k, v = self.kv(x).view(b, s, 2 * self.kv_heads, self.head_dim).transpose(1, 2).chunk(2, dim=1)
        keep = (x[:, None, None, :, 0] < 1.5).expand(b, 1, s, s)
        o = F.scaled_dot_product_attention(q, k, v, attn_mask=keep, scale=0.4, enable_gqa=True)
        return self.out(o.transpose(1, 2).reshape(b, s, -1).mean(1))


class UpsamplingDecoder(nn.Module):
    """A decoder that upsamples by scale factors, as U-Nets and VAEs do: F.interpolate(scale_factor=...) exports
    as aten::upsample_*.vec, whose `float[]? scale_factors` travels as exact text."""

    def __init__(self, classes=5):
        super().__init__()
        self.conv1, self.conv2 = nn.Conv2d(3, 4, 3, padding=1), nn.Conv2d(4, 4, 3, padding=1)
        self.fc = nn.Linear(4, classes)

    def forward(self, x):
        x = F.interpolate(F.relu(self.conv1(x)), scale_factor=2.0, mode="nearest")
        x = F.interpolate(self.conv2(x), scale_factor=1.5, mode="bilinear", align_corners=False)
        return self.fc(x.mean((2, 3)))


class WithLoss(nn.Module):
    """A model and its cross-entropy loss: what a training step differentiates."""

    def __init__(self, model, key=None):
        super().__init__()
        self.model, self.key = model, key

    def forward(self, x, target):
        out = self.model(x)
        return F.cross_entropy(out[self.key] if self.key else out, target)


class RoundThrough(torch.autograd.Function):
    """A straight-through round: the gradient passes as if the round were the identity."""

    @staticmethod
    def forward(ctx, x):
        return torch.round(x)

    @staticmethod
    def backward(ctx, grad):
        return grad
