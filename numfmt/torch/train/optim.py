"""AdamW with its moments in FP32, BF16, 8 bits (the dynamic map) or FP8, and master weights
in FP32 or BF16 (round-to-nearest, stochastic rounding or Kahan compensation).

One step on weight p with gradient g, as torchao's ``single_param_adam`` writes it (AdamW:
decoupled weight decay, Loshchilov and Hutter 2019)::

    p  <- p - lr * wd * p
    m  <- m + (1 - b1) (g  - m)            then stored in the state format
    v  <- v + (1 - b2) (g² - v)            then stored in the state format
    p  <- p - lr * (m / (1 - b1^t)) / (sqrt(v) / sqrt(1 - b2^t) + eps)
    p  stored as the master format says

The step uses the moments before they are stored (torchao and bitsandbytes alike update in
registers and quantize on the way out); the next step starts from the stored ones.

State formats (``state=``), bytes per weight for m and v together:

    "fp32"  8      the reference
    "bf16"  4      each moment rounded to BF16 (nearest even)
    "int8"  2 + 8/block   numfmt.optim_state's block-wise dynamic map (Dettmers et al. 2022):
                   signed map for m, unsigned for v; tensors under 4,096 elements keep FP32
    "fp8"   2 + 8/block   E4M3 with one exact scale amax / 448 per block (torchao AdamWFp8;
                   DeepSeek-V3 keeps its moments in BF16 and this is the step below)

Master weights (``master=``): the value the step writes back into p.

    "fp32"        p as it is (float32, or float64 in an emulation)
    "bf16"        rounded to BF16, nearest even: an update below half a BF16 ulp of p is lost
    "bf16_sr"     rounded to BF16 stochastically (numfmt.torch.round, mode="stochastic",
                  seeded): unbiased, so small updates survive on average (torchao's
                  ``bf16_stochastic_round``)
    "bf16_kahan"  rounded to BF16 nearest even, the rounding error kept in a BF16 buffer and
                  added to the next step's update (Kahan summation; Zamirai et al. 2020)

Every format is emulated on p's dtype: values are held on the format's grid, so a float64
model runs the same numbers on every machine. The 8-bit state runs numfmt's numpy quantizer on
the CPU.

References
----------
Loshchilov and Hutter, "Decoupled Weight Decay Regularization", ICLR 2019 (AdamW).
Dettmers et al., "8-bit Optimizers via Block-wise Quantization", ICLR 2022, arXiv:2110.02861.
Zamirai et al., "Revisiting BFloat16 Training", arXiv:2010.06192, 2020 (SR, Kahan summation).
torchao ``torchao/optim/adam.py`` (``single_param_adam``, ``AdamW8bit``, ``AdamWFp8``,
``_fp32_to_bf16_sr``); DeepSeek-AI, "DeepSeek-V3 Technical Report", arXiv:2412.19437, 3.3.
"""

from __future__ import annotations

import torch

from numfmt.formats import BF16, FP8_E4M3
from numfmt.optim_state import (BLOCK, MIN_8BIT_SIZE, BlockwiseState, blockwise_dequantize,
                                blockwise_quantize)
from numfmt.torch.blocks import block_quantize
from numfmt.torch.formats import round as round_to

__all__ = ["AdamW", "STATE_FORMATS", "MASTER_FORMATS", "state_bytes_per_weight"]

STATE_FORMATS = ("fp32", "bf16", "int8", "fp8")
MASTER_FORMATS = ("fp32", "bf16", "bf16_sr", "bf16_kahan")


def state_bytes_per_weight(state: str, block: int = BLOCK) -> float:
    """Bytes of Adam's two moments per weight under ``state`` (scales included, one FP32
    absmax or scale per block and moment).

    Raises
    ------
    ValueError
        If ``state`` is not one of :data:`STATE_FORMATS` or ``block`` is not positive.
    """
    _check_state(state, block)
    return {"fp32": 8.0, "bf16": 4.0}.get(state, 2.0 + 8.0 / block)


def _check_state(state, block):
    if state not in STATE_FORMATS:
        raise ValueError(f"state must be one of {STATE_FORMATS}, got {state!r}")
    if isinstance(block, bool) or not isinstance(block, int) or block < 1:
        raise ValueError(f"block must be a positive integer, got {block!r}")


class AdamW(torch.optim.Optimizer):
    """AdamW whose moments are stored in ``state`` and whose weights in ``master``.

    Parameters
    ----------
    params : iterable of torch.nn.Parameter (float32 or float64)
    lr : float, default 1e-3
    betas : (float, float), default (0.9, 0.999)
    eps : float, default 1e-8
    weight_decay : float, default 0.0
    state : {"fp32", "bf16", "int8", "fp8"}, default "fp32"
    block : int, default 2048
        Block size of the int8 and fp8 states (the paper's 2,048; torchao uses 256).
    master : {"fp32", "bf16", "bf16_sr", "bf16_kahan"}, default "fp32"
        A BF16 master format also rounds the parameters once, at construction.
    seed : int, default 0
        Seeds the stochastic rounding of "bf16_sr" (one CPU generator for the optimizer).

    Raises
    ------
    ValueError
        For an unknown ``state`` or ``master``, a bad ``block``, a negative ``lr``, ``eps`` or
        ``weight_decay``, or betas outside [0, 1).
    TypeError
        If a parameter is not float32 or float64.
    """

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0, *,
                 state="fp32", block=BLOCK, master="fp32", seed=0):
        _check_state(state, block)
        if master not in MASTER_FORMATS:
            raise ValueError(f"master must be one of {MASTER_FORMATS}, got {master!r}")
        for name, value in (("lr", lr), ("eps", eps), ("weight_decay", weight_decay)):
            if not value >= 0:
                raise ValueError(f"{name} must be >= 0, got {value!r}")
        if len(betas) != 2 or not all(0 <= b < 1 for b in betas):
            raise ValueError(f"betas must be two numbers in [0, 1), got {betas!r}")
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps,
                                      weight_decay=weight_decay))
        self.state_format, self.block, self.master = state, block, master
        self._generator = torch.Generator().manual_seed(seed)
        #: [weights whose update the BF16 master rounded away, weights whose update was not
        #: zero] in the last step (stays [0, 0] for FP32 master weights)
        self.lost = [0, 0]
        for group in self.param_groups:
            for p in group["params"]:
                if p.dtype not in (torch.float32, torch.float64):
                    raise TypeError(f"parameters must be float32 or float64, got {p.dtype}")
                if master != "fp32":
                    with torch.no_grad():
                        p.copy_(round_to(p, BF16))

    # ----------------------------------------------------------------- the stored moments
    def _store(self, x: torch.Tensor, signed: bool):
        """The moment ``x`` as the state format keeps it (a tensor, or a BlockwiseState)."""
        fmt = self.state_format
        if fmt == "fp32" or (fmt in ("int8", "fp8") and x.numel() < MIN_8BIT_SIZE):
            return x.clone()
        if fmt == "bf16":
            return round_to(x, BF16).to(x.dtype)
        if fmt == "int8":
            return blockwise_quantize(x.detach().cpu().numpy(), self.block, signed)
        flat = x.reshape(-1)
        pad = -flat.numel() % self.block
        padded = torch.cat([flat, flat.new_zeros(pad)]).reshape(-1, self.block)
        values = block_quantize(padded, FP8_E4M3, self.block, scale_format="exact").values
        return values.reshape(-1)[:flat.numel()].reshape(x.shape).to(x.dtype)

    def _load(self, s, like: torch.Tensor) -> torch.Tensor:
        if isinstance(s, BlockwiseState):
            return torch.from_numpy(blockwise_dequantize(s)).to(device=like.device,
                                                                 dtype=like.dtype)
        return s

    def state_nbytes(self) -> int:
        """Bytes the stored moments take (8-bit codes and FP32 scales counted as stored;
        the FP32 and BF16 formats at 4 and 2 bytes per value, whatever dtype emulates them)."""
        total = 0
        for st in self.state.values():
            for key in ("exp_avg", "exp_avg_sq"):
                s = st.get(key)
                if isinstance(s, BlockwiseState):
                    total += s.nbytes
                elif s is not None:
                    n = s.numel()
                    total += {"fp32": 4 * n, "bf16": 2 * n}.get(
                        self.state_format,
                        4 * n if n < MIN_8BIT_SIZE else n + 4 * -(-n // self.block))
        return total

    # ------------------------------------------------------------------------- the step
    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        self.lost = [0, 0]
        for group in self.param_groups:
            lr, (b1, b2), eps, wd = (group["lr"], group["betas"], group["eps"],
                                     group["weight_decay"])
            for p in group["params"]:
                if p.grad is None:
                    continue
                g = p.grad
                st = self.state[p]
                if not st:
                    st["step"] = 0
                    st["exp_avg"] = self._store(torch.zeros_like(p), True)
                    st["exp_avg_sq"] = self._store(torch.zeros_like(p), False)
                    if self.master == "bf16_kahan":
                        st["compensation"] = torch.zeros_like(p)
                st["step"] += 1
                t = st["step"]
                m = self._load(st["exp_avg"], p).lerp(g, 1 - b1)
                v = self._load(st["exp_avg_sq"], p).lerp(g * g, 1 - b2)
                st["exp_avg"] = self._store(m, True)
                st["exp_avg_sq"] = self._store(v, False)
                new = p - lr * wd * p if wd else p.clone()
                denom = v.sqrt() / (1 - b2 ** t) ** 0.5 + eps
                new = new - lr * (m / (1 - b1 ** t)) / denom
                self._write(p, new, st)
        return loss

    def _write(self, p, new, st):
        if self.master != "fp32":  # updates the rounding to BF16 lost whole, this step
            before = p.clone()
        self._write_master(p, new, st)
        if self.master != "fp32":
            moved = new != before
            self.lost[0] += int(((p == before) & moved).sum())
            self.lost[1] += int(moved.sum())

    def _write_master(self, p, new, st):
        if self.master == "fp32":
            p.copy_(new)
        elif self.master == "bf16":
            p.copy_(round_to(new, BF16))
        elif self.master == "bf16_sr":
            p.copy_(round_to(new.cpu(), BF16, mode="stochastic",
                             generator=self._generator).to(p.device))
        else:  # Kahan: carry what rounding to BF16 lost into the next step's update
            exact = p + ((new - p) + st["compensation"])
            rounded = round_to(exact, BF16).to(p.dtype)
            st["compensation"] = round_to(exact - rounded, BF16).to(p.dtype)
            p.copy_(rounded)
