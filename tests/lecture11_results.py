"""A small made-up Results of lecture 11, with every field its six demos print, for the tests
that need one without the model (the widgets, the stored-run format)."""

from __future__ import annotations

import importlib

import numpy as np

L = importlib.import_module("lectures.11_quantized_finetuning")


def fake_results():
    """A Results of the quick workload (4 evaluation windows, 12 steps, curves at 0, 4, 8 and
    12) for every method the quick run trains, with made-up numbers."""
    w = L.QUICK
    rng = np.random.default_rng(11)
    float_nll = 3.5 + 0.2 * rng.random(w.n_eval)

    def nll(above: float):
        return float_nll + above + 0.02 * rng.standard_normal(w.n_eval)

    def run(method, start, end, bits, trainable, info):
        nlls = [nll(start + (end - start) * k / 3) for k in range(4)]
        curve = [(s, float(np.exp(n.mean()))) for s, n in zip(L.curve_points(w), nlls)]
        return L.Run(method, curve, nlls[-1], nlls[0], trainable, 12.5, 12 * 128, bits,
                     {"curve_nll": nlls, **info})

    def sweep(method, rates, best):
        losses = {lr: 3.0 + abs(np.log(lr / rates[best])) + 0.05 * rng.random(w.sweep_steps - 1)
                  for lr in rates}
        return L.Sweep(method, losses, rates[best], 7.25)

    n_codes = 14_155_776
    full = run("full fine-tuning (float)", 0.0, -0.1, 32.0, n_codes,
               {"sweep": sweep("full fine-tuning (float)", w.rates_full, 1)})
    lora = run("LoRA (float base)", 0.0, -0.08, 32.0, 325_632,
               {"sweep": sweep("LoRA (float base)", w.rates_lora, 1), "adapter_bits": 0.098,
                "base_bytes": 4 * n_codes})
    qlora = run("QLoRA (NF4 base)", 0.2, 0.1, 4.127, 325_632,
                {"sweep": sweep("QLoRA (NF4 base)", w.rates_lora, 2), "adapter_bits": 0.098,
                 "base_bytes": 7_000_000})
    qat = {}
    for kind, end, extra in (("QAT", 1.3, {}), ("KD-QAT", 1.28, {}),
                             ("LSQ", 1.1, {"scale_change": 0.3, "scale_median": 0.017})):
        m = f"{kind} INT3 g128 from RTN"
        r = run(m, 1.7, end, 3.161, n_codes + (119_808 if kind == "LSQ" else 0),
                {"codes_changed": 15_146, "codes": n_codes, "scale_change": 0.0,
                 "scale_median": 0.0, "packed_bits": 4.214, **extra})
        r.info["packed_nll"] = r.nll.copy()
        qat[m] = r
    ptq = {("RTN", "INT3 g128"): (qat["QAT INT3 g128 from RTN"].start_nll, 3.161, 9.5, 4.214)}
    bills = [L.Bill(m, 100, 100, 40, 40, 84, {"trained": 40, "grads": 40, "adam": 84})
             for m in (full.method, lora.method, qlora.method, "QAT INT3 g128 from RTN")]
    bills[-1].measured["scales"] = 12.5
    reach = {"INT3 g128": {"reach": 2.0e-3, "reachable": 0.0, "median_steps": 1158}}
    return L.Results(w, float_nll, full, lora, qlora, qat, ptq, reach, bills,
                     {"double_quant": 54_700_000, "fp32_absmax": 59_700_000,
                      "params": 106_168_320},
                     "test machine", 4, {"bytes": 301_989_888, "cpu_s": 3.5, "vocab": 49152,
                                         "windows": 12})
