"""The model cache's integrity: every file's SHA-256 is recorded when the cache is written and
checked when it is read; a damaged cache is rebuilt from the GGUF file, never read.

A tiny Llama (2 layers of width 16) with a word-level tokenizer stands in for SmolLM2, in a
temporary $LOWPREC_CACHE: the user's own cache is never touched. The GGUF reader is replaced
by a function that builds the tiny model and counts its calls."""

import hashlib
import json

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytest.importorskip("safetensors")
pytest.importorskip("tokenizers")

from lectures import llm  # noqa: E402
from lectures.llm import checkpoint as C  # noqa: E402

SHA = "ab" * 32


def tiny_model_and_tokenizer():
    from tokenizers import Tokenizer, models, pre_tokenizers
    vocab = {w: i for i, w in enumerate(["<unk>", "<s>", "</s>", "a", "b", "c"])}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer = transformers.PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>",
                                                     bos_token="<s>", eos_token="</s>")
    config = transformers.LlamaConfig(vocab_size=6, hidden_size=16, intermediate_size=32,
                                      num_hidden_layers=2, num_attention_heads=2,
                                      num_key_value_heads=1, max_position_embeddings=64,
                                      tie_word_embeddings=True)
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(config).float().eval()
    return model, tokenizer


@pytest.fixture
def harness(tmp_path, monkeypatch):
    """load_checkpoint on a fake GGUF file and a temporary cache; .builds counts GGUF loads."""
    monkeypatch.setenv("LOWPREC_CACHE", str(tmp_path / "cache"))
    gguf = tmp_path / "model.gguf"
    gguf.write_bytes(b"GGUF stand-in")
    monkeypatch.setattr(C, "verify_gguf", lambda path: SHA)
    state = {"builds": 0}

    def fake_load_gguf(path, *libs):
        state["builds"] += 1
        return tiny_model_and_tokenizer()

    monkeypatch.setattr(C, "_load_gguf", fake_load_gguf)

    def load():
        return llm.load_checkpoint(path=gguf, device="cpu")

    load.folder = tmp_path / "cache" / f"smollm2-135m-{SHA[:16]}"
    load.state = state
    return load


def sha256(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()        # hashlib directly, not the code


def test_the_cache_records_every_files_digest_and_is_read_back(harness):
    first = harness()
    assert not first.from_cache and harness.state["builds"] == 1
    manifest = json.loads((harness.folder / C.MANIFEST).read_text())
    files = sorted(p.name for p in harness.folder.iterdir() if p.name != C.MANIFEST)
    assert sorted(manifest) == files and C.WEIGHTS_FILE in files and "config.json" in files
    assert all(manifest[name] == sha256(harness.folder / name) for name in files)
    again = harness()
    assert again.from_cache and harness.state["builds"] == 1
    for (ka, va), (kb, vb) in zip(first.model.state_dict().items(),
                                  again.model.state_dict().items()):
        assert ka == kb and torch.equal(va, vb)


def nan_poison(path):
    """Set one float32 of the weights to NaN in place: same size, same header, valid file."""
    data = bytearray(path.read_bytes())
    data[-4:] = b"\x00\x00\xc0\x7f"
    path.write_bytes(bytes(data))


DAMAGE = {
    "weights-nan": lambda f: nan_poison(f / C.WEIGHTS_FILE),
    "weights-truncated": lambda f: (f / C.WEIGHTS_FILE).write_bytes(
        (f / C.WEIGHTS_FILE).read_bytes()[:1000]),
    "weights-empty": lambda f: (f / C.WEIGHTS_FILE).write_bytes(b""),
    "weights-missing": lambda f: (f / C.WEIGHTS_FILE).unlink(),
    "config-corrupt": lambda f: (f / "config.json").write_text("{not json"),
    "tokenizer-missing": lambda f: (f / "tokenizer.json").unlink(),
    "manifest-missing": lambda f: (f / C.MANIFEST).unlink(),
    "manifest-corrupt": lambda f: (f / C.MANIFEST).write_text("[1, 2"),
    "manifest-empty-dict": lambda f: (f / C.MANIFEST).write_text("{}"),
}


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_a_damaged_cache_is_rebuilt_not_read(harness, damage):
    reference = harness()
    DAMAGE[damage](harness.folder)
    assert C.cache_problem(harness.folder) is not None
    rebuilt = harness()
    assert not rebuilt.from_cache and harness.state["builds"] == 2
    assert C.cache_problem(harness.folder) is None            # replaced by an intact one
    for (ka, va), (kb, vb) in zip(reference.model.state_dict().items(),
                                  rebuilt.model.state_dict().items()):
        assert ka == kb and torch.equal(va, vb)
        assert torch.isfinite(vb).all()
    assert harness().from_cache and harness.state["builds"] == 2
    leftovers = [p.name for p in harness.folder.parent.iterdir() if p != harness.folder]
    assert leftovers == []                                     # no temporary or damaged copy


def test_a_cache_that_matches_but_cannot_be_read_names_the_repair(harness, monkeypatch):
    harness()

    def broken(*args, **kwargs):
        raise OSError("a library cannot read it")

    monkeypatch.setattr(transformers.AutoConfig, "from_pretrained", broken)
    with pytest.raises(llm.ModelUnavailableError, match=r"rm -r .*smollm2-135m-"):
        harness()


def test_gguf_tensor_types_on_files_that_are_not_gguf(tmp_path):
    pytest.importorskip("gguf")
    text = tmp_path / "notes.txt"
    text.write_text("not a model\n" * 100)
    with pytest.raises(ValueError, match="not a GGUF file"):
        llm.gguf_tensor_types(text)
    with pytest.raises(ValueError, match="not a file"):
        llm.gguf_tensor_types(tmp_path / "absent.gguf")
    try:
        source = llm.gguf_path()
    except llm.ModelUnavailableError:
        pytest.skip("the model package is not installed")
    head = source.open("rb").read(1 << 20)
    for size in (1000, 1 << 20):                               # inside the header, inside data
        cut = tmp_path / f"cut{size}.gguf"
        cut.write_bytes(head[:size])
        with pytest.raises(ValueError, match="not a complete GGUF file"):
            llm.gguf_tensor_types(cut)


# ---------------------------------------------------------------------------------------------
# The first load's conversion: no carriage-return frames in a redirected stderr
# ---------------------------------------------------------------------------------------------
def test_gguf_conversion_draws_through_the_name_we_swap():
    """transformers' GGUF loader draws its conversion bar through the ``tqdm`` name of its
    module (which its disable_progress_bar does not reach): the name the harness swaps."""
    import inspect
    from transformers import modeling_gguf_pytorch_utils as module
    assert "tqdm(" in inspect.getsource(module.load_gguf_checkpoint)
    assert module.tqdm.__module__.startswith("tqdm")


def test_gguf_conversion_logs_one_line_when_redirected(capsys):
    """Redirected: the conversion's bar draws nothing (no ``\\r`` frames) and one line says
    it finished; the module's own tqdm is back afterwards."""
    import io
    from transformers import modeling_gguf_pytorch_utils as module
    drawn = module.tqdm
    log = io.StringIO()
    with C._conversion_progress(log):
        assert list(module.tqdm(range(5), desc="Converting")) == [0, 1, 2, 3, 4]
    assert module.tqdm is drawn
    err = capsys.readouterr().err
    assert "\r" not in err and "\r" not in log.getvalue()
    lines = log.getvalue().splitlines()
    assert len(lines) == 1 and lines[0].startswith("converting the GGUF file") and "1/1" in lines[0]


def test_gguf_conversion_keeps_the_bar_on_a_terminal():
    import io
    from transformers import modeling_gguf_pytorch_utils as module

    class Terminal(io.StringIO):
        def isatty(self):
            return True

    drawn, term = module.tqdm, Terminal()
    with C._conversion_progress(term):
        assert module.tqdm is drawn
    assert term.getvalue() == ""


# ---------------------------------------------------------------------------------------------
# Files the manifest does not list, and a cache directory that cannot be written
# ---------------------------------------------------------------------------------------------
def test_an_unlisted_file_is_damage_and_the_cache_is_rebuilt(harness):
    reference = harness()
    # transformers reads added_tokens.json beside tokenizer.json: it would add a token
    (harness.folder / "added_tokens.json").write_text('{"a b": 6}')
    assert "added_tokens.json" in C.cache_problem(harness.folder)
    rebuilt = harness()
    assert not rebuilt.from_cache and harness.state["builds"] == 2
    assert not (harness.folder / "added_tokens.json").exists()
    assert rebuilt.tokenizer("a b")["input_ids"] == reference.tokenizer("a b")["input_ids"]


@pytest.mark.parametrize("root", ["/proc/lowprec-x", "/sys/lowprec-x", "file"])
def test_an_unwritable_cache_directory_runs_uncached_and_says_so(harness, monkeypatch,
                                                                tmp_path, capsys, root):
    if root == "file":                       # a path under a regular file
        (tmp_path / "plain").write_text("x")
        root = str(tmp_path / "plain" / "cache")
    monkeypatch.setenv("LOWPREC_CACHE", root)
    got = harness()
    assert not got.from_cache and harness.state["builds"] == 1
    err = capsys.readouterr().err
    assert "LOWPREC_CACHE" in err and root in err and "Traceback" not in err
    C._write_cache(C.Path(root) / "c", got.model, got.tokenizer)   # swallowed, as documented
