"""A tiny LLaMA-style decoder whose every linear layer trains under a low-precision recipe.

The architecture is LLaMA's (Touvron et al. 2023, arXiv 2302.13971, section 2.2): pre-norm
RMSNorm, rotary position embeddings (RoPE, Su et al. 2021, arXiv 2104.09864) on queries and
keys, causal multi-head attention, and a SwiGLU feed-forward (Shazeer 2020, arXiv 2002.05202),
written in nanoGPT's plain shape. Every linear layer is a :class:`numfmt.torch.train.QuantLinear`
named by its path (``layers.0.attn.q``, ``layers.1.mlp.down``, ``lm_head``), so a recipe's
``high_precision_layers`` patterns pick layers by name. The embedding is a table lookup, not a
GEMM, and the attention scores and their weighted sum stay in the model's dtype, unquantized
(float32, or float64 after ``.double()``, as the lectures train: :mod:`lectures.tinylm.loop`
says why); the recipes quantize the linear layers' GEMMs, as TransformerEngine and the NVFP4
paper do.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F

from numfmt.torch.train import QuantLinear


@dataclass(frozen=True)
class TinyLMConfig:
    """The model's shape. Every GEMM inner dimension (d_model, d_ff, and the tokens of a step)
    is a multiple of 128, so the recipes' 1x16, 1x32, 1x128 and 128x128 blocks divide it."""
    vocab_size: int = 256          # bytes
    context: int = 64              # tokens per sequence
    d_model: int = 128
    n_layers: int = 2
    n_heads: int = 4
    d_ff: int = 256                # SwiGLU hidden width
    rope_base: float = 10000.0
    norm_eps: float = 1e-5

    def __post_init__(self):
        for name in ("vocab_size", "context", "d_model", "n_layers", "n_heads", "d_ff"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        if self.d_model % self.n_heads or (self.d_model // self.n_heads) % 2:
            raise ValueError(f"d_model ({self.d_model}) must be n_heads ({self.n_heads}) times "
                             f"an even head size")

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads


class RMSNorm(nn.Module):
    """x / sqrt(mean(x²) + eps) · g (Zhang and Sennrich 2019, arXiv 1910.07467)."""

    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):                                            # (B, T, C)
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rope_tables(context: int, head_dim: int, base: float) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin of RoPE's angles t·base^(-2i/head_dim): float32, each (context, head_dim/2)
    (buffers of the model, so ``.double()`` widens these float32 values)."""
    inv_freq = base ** (-torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)
    angles = torch.outer(torch.arange(context, dtype=torch.float64), inv_freq)
    return angles.cos().float(), angles.sin().float()


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate each pair (x[2i], x[2i+1]) of every head by its position's angle.

    x: (B, H, T, D) in the model's dtype; cos, sin: (T, D/2). Returns (B, H, T, D). The
    interleaved-pairs form of Su et al. (2021), equation 34.
    """
    x1, x2 = x[..., 0::2], x[..., 1::2]                              # (B, H, T, D/2) each
    out = torch.stack((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1)
    return out.flatten(-2)                                           # (B, H, T, D)


class Attention(nn.Module):
    def __init__(self, cfg: TinyLMConfig, name: str, recipe, seed: int):
        super().__init__()
        d = cfg.d_model
        self.n_heads = cfg.n_heads
        self.q, self.k, self.v, self.o = (
            QuantLinear(d, d, recipe, name=f"{name}.{p}", seed=seed + i)
            for i, p in enumerate("qkvo"))

    def forward(self, x, cos, sin):                                  # x: (B, T, C)
        B, T, C = x.shape
        def heads(t):
            return t.view(B, T, self.n_heads, C // self.n_heads).transpose(1, 2)
        q, k, v = heads(self.q(x)), heads(self.k(x)), heads(self.v(x))   # (B, H, T, D)
        q, k = apply_rope(q, cos[:T], sin[:T]), apply_rope(k, cos[:T], sin[:T])
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # (B, H, T, D)
        return self.o(y.transpose(1, 2).reshape(B, T, C))            # (B, T, C)


class SwiGLU(nn.Module):
    def __init__(self, cfg: TinyLMConfig, name: str, recipe, seed: int):
        super().__init__()
        d, h = cfg.d_model, cfg.d_ff
        self.gate = QuantLinear(d, h, recipe, name=f"{name}.gate", seed=seed)
        self.up = QuantLinear(d, h, recipe, name=f"{name}.up", seed=seed + 1)
        self.down = QuantLinear(h, d, recipe, name=f"{name}.down", seed=seed + 2)

    def forward(self, x):                                            # (B, T, C)
        return self.down(F.silu(self.gate(x)) * self.up(x))          # (B, T, C)


class Block(nn.Module):
    def __init__(self, cfg: TinyLMConfig, i: int, recipe, seed: int):
        super().__init__()
        self.attn_norm = RMSNorm(cfg.d_model, cfg.norm_eps)
        self.attn = Attention(cfg, f"layers.{i}.attn", recipe, seed)
        self.mlp_norm = RMSNorm(cfg.d_model, cfg.norm_eps)
        self.mlp = SwiGLU(cfg, f"layers.{i}.mlp", recipe, seed + 4)

    def forward(self, x, cos, sin):                                  # (B, T, C)
        x = x + self.attn(self.attn_norm(x), cos, sin)
        return x + self.mlp(self.mlp_norm(x))


class TinyLM(nn.Module):
    """The decoder: bytes (B, T) int64 -> next-byte logits (B, T, vocab) float32.

    Parameters
    ----------
    cfg : TinyLMConfig
    recipe : str or numfmt.torch.train.Recipe
        How every linear's three GEMMs are quantized (``"fp32"``: not at all).
    seed : int
        Seeds the initial weights and every linear's quantization generator (stochastic
        rounding, Hadamard signs), so a run repeats bit for bit.
    """

    def __init__(self, cfg: TinyLMConfig = TinyLMConfig(), recipe="fp32", seed: int = 0):
        super().__init__()
        self.cfg = cfg
        torch.manual_seed(seed)
        self.embed = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.layers = nn.ModuleList(Block(cfg, i, recipe, seed * 1000 + 16 * i)
                                    for i in range(cfg.n_layers))
        self.norm = RMSNorm(cfg.d_model, cfg.norm_eps)
        self.lm_head = QuantLinear(cfg.d_model, cfg.vocab_size, recipe, name="lm_head",
                                   seed=seed * 1000 + 999)
        cos, sin = rope_tables(cfg.context, cfg.head_dim, cfg.rope_base)
        self.register_buffer("rope_cos", cos, persistent=False)
        self.register_buffer("rope_sin", sin, persistent=False)
        self._init_weights(seed)

    def _init_weights(self, seed: int) -> None:
        # GPT-2's scheme (Radford et al. 2019): N(0, 0.02), the residual outputs scaled by
        # 1/sqrt(2·n_layers); drawn from one generator in module order, so a seed fixes them.
        g = torch.Generator().manual_seed(seed)
        std = 0.02
        with torch.no_grad():
            for name, p in self.named_parameters():
                if name.endswith("norm.weight"):
                    continue
                residual = name.endswith((".attn.o.weight", ".mlp.down.weight"))
                s = std / math.sqrt(2 * self.cfg.n_layers) if residual else std
                p.copy_(torch.randn(p.shape, generator=g, dtype=torch.float64) * s)

    def linears(self) -> dict[str, nn.Module]:
        """Every QuantLinear by its name, in forward order."""
        return {m.name: m for m in self.modules() if isinstance(m, QuantLinear)}

    def set_recipe(self, recipe) -> None:
        for m in self.linears().values():
            m.recipe = recipe

    def forward(self, idx):                                          # idx: (B, T) int64
        x = self.embed(idx)                                          # (B, T, C)
        for block in self.layers:
            x = block(x, self.rope_cos, self.rope_sin)
        return self.lm_head(self.norm(x))                            # (B, T, vocab)
