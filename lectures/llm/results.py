"""A lecture's results as data: written by ``--save PATH`` (lectures 08, 09 and 11), read back
with :func:`load_results` to print or plot them again without the model.

A notebook that shows a run too long to repeat (a real-model run) keeps it as such a file,
``lectures/widgets/lectureNN_stored.json`` (:func:`stored_path`), and prints it through the
lecture's own ``show_demoK`` functions, so that it reads in the reader's language and a Chinese
notebook is regenerated without running the lecture again.

The format is plain JSON. Demo results (dataclasses) are stored field by field with their
class name and rebuilt from the lecture module; numpy arrays keep their dtype; tuples and
dicts whose keys are not all strings are tagged, so a result comes back equal to the one saved
(floats round-trip exactly through ``repr``).
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import tempfile
from pathlib import Path

import numpy as np

from lectures.i18n import domain

_ = domain("llm").gettext

__all__ = ["load_full_run", "load_results", "save_results", "stored_path"]

WIDGETS_DIR = Path(__file__).resolve().parent.parent / "widgets"


def _encode(obj):
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {"__dataclass__": type(obj).__name__,
                "fields": {f.name: _encode(getattr(obj, f.name))
                           for f in dataclasses.fields(obj)}}
    if isinstance(obj, np.ndarray):
        return {"__array__": _encode(obj.tolist()), "dtype": str(obj.dtype),
                "shape": list(obj.shape)}
    if isinstance(obj, np.generic):
        return _encode(obj.item())
    if isinstance(obj, float) and not math.isfinite(obj):
        return {"__float__": repr(obj)}
    if isinstance(obj, tuple):
        return {"__tuple__": [_encode(v) for v in obj]}
    if isinstance(obj, list):
        return [_encode(v) for v in obj]
    if isinstance(obj, dict):
        if all(isinstance(k, str) for k in obj):
            return {"__dict__": {k: _encode(v) for k, v in obj.items()}}
        return {"__items__": [[_encode(k), _encode(v)] for k, v in obj.items()]}
    if obj is None or isinstance(obj, (bool, int, float, str)):
        return obj
    raise TypeError(f"cannot store a {type(obj).__name__} as JSON")


def _decode(obj, classes):
    if isinstance(obj, list):
        return [_decode(v, classes) for v in obj]
    if not isinstance(obj, dict):
        return obj
    if "__dataclass__" in obj:
        cls = classes[obj["__dataclass__"]]
        return cls(**{k: _decode(v, classes) for k, v in obj["fields"].items()})
    if "__array__" in obj:
        return np.array(_decode(obj["__array__"], classes),
                        dtype=obj["dtype"]).reshape(obj["shape"])
    if "__float__" in obj:
        return float(obj["__float__"])
    if "__tuple__" in obj:
        return tuple(_decode(v, classes) for v in obj["__tuple__"])
    if "__items__" in obj:
        return {_decode(k, classes): _decode(v, classes) for k, v in obj["__items__"]}
    return {k: _decode(v, classes) for k, v in obj["__dict__"].items()}


def save_path(text: str) -> Path:
    """``--save PATH``'s argparse type: the path, refused at once (argparse's exit 2 with the
    usage line, before any work) if it names a directory."""
    import argparse
    path = Path(text)
    if path.is_dir():
        raise argparse.ArgumentTypeError(
            _("{path} is a directory; --save needs the path of a file").format(path=text))
    return path


def save_results(path, results: dict, about: dict | None = None) -> Path:
    """Write ``results`` (name -> demo result: dataclasses, arrays, lists, dicts, numbers) as
    JSON to ``path``, atomically (a temporary file renamed over it). ``about`` records how they
    were made (workload, command). Returns the path.

    Raises
    ------
    TypeError
        If a value is of a type the format does not store.
    ValueError
        If ``path`` is an existing directory.
    """
    path = Path(path)
    if path.is_dir():
        raise ValueError(f"path {str(path)!r} is a directory; save_results needs a file path")
    text = json.dumps({"about": about or {}, "results": _encode(results)}, indent=1,
                      ensure_ascii=False)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text + "\n")
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def load_results(path, module) -> tuple[dict, dict]:
    """(results, about) from a file of :func:`save_results`, the dataclasses rebuilt from the
    classes of ``module`` (the lecture that saved them) and of the harness
    (:class:`~lectures.llm.evaluate.PairedRatio`, the quantizer settings).

    Raises
    ------
    FileNotFoundError
        If ``path`` does not exist.
    ValueError
        If it is not such a file, or names a class ``module`` lacks.
    """
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    if not isinstance(data, dict) or "results" not in data:
        raise ValueError(f"{path} is not a file of lecture results")
    from lectures.llm import evaluate, quantizers     # classes results may hold
    classes = {name: getattr(m, name) for m in (evaluate, quantizers, module) for name in dir(m)
               if isinstance(getattr(m, name), type)}
    try:
        return _decode(data["results"], classes), data.get("about", {})
    except KeyError as err:
        raise ValueError(f"{path} names a result class {err} that "
                         f"{module.__name__} does not define") from None


def load_full_run(path, module, command: str, demos) -> dict:
    """The results of a stored full run of ``command`` (e.g. "08_real_model.py"), as
    :func:`load_results` rebuilds them from ``module``'s classes.

    Raises
    ------
    ValueError
        If the file was not written by the full workload of ``command`` (``--quick`` is not a
        run a notebook presents as the lecture's) or lacks one of ``demos``.
    """
    results, about = load_results(path, module)
    if about.get("command") != command or not set(demos) <= set(results):
        raise ValueError(f"{path} is not a full run of {command} saved with --save "
                         f"(about: {about})")
    return results


def stored_path(nn: str) -> Path:
    """Where notebook ``nn``'s stored run lives: ``lectures/widgets/lectureNN_stored.json``
    (written by ``python lectures/NN_*.py --save <that path>``).

    Raises
    ------
    ValueError
        If ``nn`` is not a two-digit lecture number such as "09".
    """
    if not (isinstance(nn, str) and len(nn) == 2 and nn.isdigit()):
        raise ValueError(f"nn must be a two-digit lecture number such as '09', got {nn!r}")
    return WIDGETS_DIR / f"lecture{nn}_stored.json"
