"""Shared helpers for the llama.cpp golden generators in scripts/goldens/.

Not run directly; see gen_smollm2_goldens.py and gen_stories260k_goldens.py.
Requires `pip install llama-cpp-python==0.3.36` (see scripts/goldens/README.md).
"""

import ctypes
import hashlib
import os
import platform
import datetime

import numpy as np

LLAMA_CPP_PYTHON_VERSION = "0.3.36"
# The llama.cpp commit vendored by llama-cpp-python 0.3.36 (its CHANGELOG:
# "update llama.cpp to ggml-org/llama.cpp@0c1e57098"; the sdist's submodule HEAD).
LLAMA_CPP_COMMIT = "0c1e57098bba43ac29e6e3b677cdceebdd22334f"
LLAMA_CPP_COMMIT_DATE = "2026-10-01T11:11:48+09:00"


def f32(x):
    """Shortest decimal that round-trips the float32 value x, as a Python float."""
    return float(np.format_float_positional(np.float32(x), unique=True, trim="-"))


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def topk(row, k):
    """Top-k (id, logit) pairs of one logit row, by logit descending, then id ascending."""
    row = np.asarray(row, dtype=np.float32)
    # stable: sort by (-logit, id)
    idx = np.lexsort((np.arange(row.size), -row))[:k]
    return [[int(i), f32(row[i])] for i in idx]


def row_stats(row):
    row = np.asarray(row, dtype=np.float64)
    return {
        "max": f32(row.max()),
        "min": f32(row.min()),
        "mean": f32(row.mean()),
        "std": f32(row.std()),  # population std over the full vocabulary
    }


def runtime_info(llama_cpp_module):
    info = {
        "llama_cpp_python_version": llama_cpp_module.__version__,
        "llama_cpp_commit": LLAMA_CPP_COMMIT,
        "llama_cpp_commit_date": LLAMA_CPP_COMMIT_DATE,
        "llama_cpp_build_number": (
            "unknown: the sdist vendors a shallow (depth-1) clone, so llama.cpp's "
            "build-info reports build number 1"),
        "system_info": llama_cpp_module.llama_print_system_info().decode().strip(),
        "machine": platform.machine(),
        "python": platform.python_version(),
        "generated_utc": datetime.datetime.now(datetime.timezone.utc)
        .replace(microsecond=0).isoformat(),
    }
    # ggml exports its own version/commit; read them if the shared lib has them.
    try:
        libdir = os.path.join(os.path.dirname(llama_cpp_module.__file__), "lib")
        ggml = ctypes.CDLL(os.path.join(libdir, "libggml-base.so"))
        for fn in ("ggml_version", "ggml_commit"):
            f = getattr(ggml, fn, None)
            if f is not None:
                f.restype = ctypes.c_char_p
                info[fn] = f().decode()
    except OSError:
        pass
    return info
