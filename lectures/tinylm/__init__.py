"""A tiny LLaMA-style byte-level language model for lecture 10: trained from scratch, in low
precision, on the bytes of CPython's language reference.

model.py   the decoder (RMSNorm, SwiGLU, RoPE), every linear a numfmt.torch.train.QuantLinear
data.py    the bytes, a disjoint validation split, seeded batches
loop.py    a short seeded training loop (AdamW, float64 master weights, loss scaling), bits/byte
probe.py   weight gradients of several batches under several recipes, against FP32's, and
           their paired comparison (the sign test)
runs.py    many runs by label and seed on worker processes, demos printed as their runs finish,
           labels compared paired by seed
"""
