"""Shared test helpers: one error check, one tolerance rule, one description of an array
library, the references and originals more than one test file uses.

- `raises`: a `PosencError` whose message names the argument, the rule and the value.
- `assert_close`: float64 output against a float64 reference of another formula.
- `assert_correctly_rounded`: an output equals the reference rounded once to its dtype
  (within half a unit in the last place plus the reference's own error, and the rounding
  itself wherever that error cannot change it).
- `within_ulps`: two paths that each round once agree within ``n`` units in the last place.
- `Backend` / `to_numpy`: an array library as the parity tests use it (the `backend` fixture
  in conftest.py makes one per installed library), and the way back to NumPy.
- `dtype_for`: a dtype by name, in the library that has it.
- `exact_table`: the paper's table from mpmath at 60 digits.
- `rotated` / `qk`: a rotation in float64 from the formula, and query and key inputs.
- `compile_counter`: a torch.compile backend that counts the graphs it is given.
- `onnx_session`: a module exported to ONNX with dynamic shapes, and an onnxruntime session.
- `hf_rotary_module`: transformers' own rotary module for a config.
- `tutorial_table`, `whisper_float32`, `fairseq_float32`: the originals' own float32 tables,
  as published.
"""

from __future__ import annotations

import contextlib
import importlib
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import mpmath
import numpy as np
import pytest

from posenc import PosencError

FLOAT32_HALF_ULP = 2.0**-25  # at values of magnitude <= 1
TOL64 = 1e-10  # float64 output vs a float64 reference written another way
ANGLE_BOUND = 8e-9  # |p| < 2^24: angle error of posenc's float64 path (2^24 * 2^-53 * a few)

# significand bits and smallest normal exponent of each output dtype
_FORMATS = {
    "float64": (52, -1022),
    "float32": (23, -126),
    "float16": (10, -14),
    "bfloat16": (7, -126),
}


@contextlib.contextmanager
def raises(*fragments: str) -> Iterator[pytest.ExceptionInfo[PosencError]]:
    """``pytest.raises(PosencError)`` whose message holds every fragment (the argument, the
    rule, the value)."""
    with pytest.raises(PosencError) as info:
        yield info
    for f in fragments:
        assert f in str(info.value), (f, str(info.value))


def dtype_name(x: Any) -> str:
    """``float32``, ``bfloat16``… of a NumPy, torch or JAX array (or a dtype)."""
    dt = getattr(x, "dtype", x)
    return str(dt).replace("torch.", "")


def to_numpy(x: Any) -> np.ndarray:
    """Any backend's array as NumPy, bit for bit (bfloat16 widened to float32, exactly)."""
    if hasattr(x, "detach"):
        x = x.detach().cpu()
        if dtype_name(x) == "bfloat16":
            x = x.float()
        return x.numpy()
    if type(x).__module__.startswith("array_api_strict"):
        return np.from_dlpack(x)
    out = np.asarray(x)
    if out.dtype.name == "bfloat16":  # JAX's ml_dtypes bfloat16
        out = out.astype(np.float32)
    return out


def as_float64(x: Any) -> np.ndarray:
    """NumPy or torch values (any float dtype, any device) as a float64 NumPy array."""
    return to_numpy(x).astype(np.float64)


def ulp(values: np.ndarray, dtype: str) -> np.ndarray:
    """The spacing of ``dtype`` at each of ``values`` (normal or subnormal; at zero, the
    smallest subnormal's)."""
    bits, emin = _FORMATS[dtype]
    mag = np.abs(np.asarray(values, dtype=np.float64))
    exp = np.floor(np.log2(np.where(mag > 0, mag, 1.0)))
    return np.exp2(np.where(mag > 0, np.maximum(exp, emin), emin) - bits)


def rounded(values: np.ndarray, dtype: str) -> np.ndarray:
    """float64 ``values`` rounded once to ``dtype`` (nearest, ties to even), as float64."""
    step = ulp(values, dtype)
    return np.round(np.asarray(values, dtype=np.float64) / step) * step


def assert_close(got: Any, want: np.ndarray, tol: float = TOL64) -> None:
    """Same shape, max |got - want| <= tol."""
    got = as_float64(got)
    assert got.shape == want.shape, (got.shape, want.shape)
    err = np.abs(got - want).max(initial=0.0)
    assert err <= tol, f"max error {err:.3g} > {tol:g}"


def assert_correctly_rounded(
    got: Any, want64: np.ndarray, *, slack: Any = 0.0, max_undecided: float | None = None
) -> None:
    """``got`` is the value ``want64`` stands for rounded once to ``got``'s dtype (nearest,
    ties to even), where ``want64`` is within ``slack`` (a number, or one per value) of it:
    the reference's own float64 error, or for an exact reference posenc's own.

    Every value is finite and within half a unit in the last place of that dtype plus
    ``slack``; wherever every value within ``slack`` of ``want64`` rounds alike (the rounding
    is decided), ``got`` is that rounding exactly; and with ``max_undecided``, at most that
    fraction of the values are undecided."""
    dtype = dtype_name(got)
    g = as_float64(got)
    assert g.shape == want64.shape, (g.shape, want64.shape)
    assert np.isfinite(g).all(), "non-finite output"
    err = np.abs(g - want64)
    bound = ulp(want64, dtype) / 2 + slack + 1e-300
    bad = err > bound
    assert not bad.any(), (
        f"{bad.sum()} {dtype} values not rounded once from the reference; worst error "
        f"{err.max():.3g} at {np.argwhere(bad)[0]}"
    )
    low, high = rounded(want64 - slack, dtype), rounded(want64 + slack, dtype)
    decided = low == high
    wrong = decided & (g != low)
    assert not wrong.any(), (
        f"{wrong.sum()} {dtype} values are not the rounding of the reference; first at "
        f"{np.argwhere(wrong)[0]}: {g[wrong][0]!r}, not {low[wrong][0]!r}"
    )
    if max_undecided is not None:
        undecided = int((~decided).sum())
        assert undecided <= max_undecided * decided.size, f"{undecided} of {decided.size} undecided"


def within_float32(got: Any, want: np.ndarray, *, scale: float = 1.0) -> None:
    """``got`` is the float64 ``want`` rounded once to float32 (within a half ulp of 1)."""
    err = np.abs(as_float64(got) - want).max(initial=0.0)
    assert err <= FLOAT32_HALF_ULP * scale + 1e-12, f"max error {err:.3g}"


def within_ulps(a: Any, b: Any, n: int = 1, *, min_equal: float = 0.0) -> None:
    """Two paths that each round the same float64 values once (with float64 sines that may
    differ in the last bit) agree within ``n`` units in the last place of their dtype, and at
    least a fraction ``min_equal`` of the values are the same bits."""
    dtype = dtype_name(a)
    assert dtype == dtype_name(b), (dtype, dtype_name(b))
    x, y = as_float64(a), as_float64(b)
    assert x.shape == y.shape
    bad = np.abs(x - y) > n * ulp(np.maximum(np.abs(x), np.abs(y)), dtype)
    assert not bad.any(), f"{bad.sum()} values differ by more than {n} ulp"
    assert (x == y).mean() >= min_equal, f"only {(x == y).mean():.4f} of the values are equal"


def dtype_for(library: str, name: str) -> Any:
    """The dtype ``name`` as ``library`` takes it: torch's own dtypes for torch, and for
    bfloat16 (which NumPy lacks); the name itself for NumPy."""
    if name == "bfloat16" or library == "torch":
        torch = pytest.importorskip("torch")
        return getattr(torch, name)
    return name


@dataclass(frozen=True)
class Backend:
    """An array library as the parity tests use it (made by the `backend` fixture)."""

    name: str  # "numpy", "torch", "jax", "array-api-strict"
    asarray: Callable[[np.ndarray], Any]  # a NumPy array as this library's array
    like: Any  # an array of this library: posenc's ``like=`` for tables and grids
    float64: Any  # this library's float64 dtype; None where it has none (JAX without x64)
    engine: bool  # evaluated by posenc's engine (NumPy's bits); else the direct formula
    strict: Callable[[], contextlib.AbstractContextManager[Any]] = contextlib.nullcontext
    """The library at its strictest (JAX: strict dtype promotion)."""
    jit: Callable[[Callable[..., Any]], Callable[..., Any]] = lambda fn: fn
    """A function as the library compiles it (JAX: ``jax.jit``); elsewhere as it is."""

    @staticmethod
    def to_numpy(x: Any) -> np.ndarray:
        return to_numpy(x)

    def owns(self, x: Any) -> bool:
        """``x`` is an array of this library."""
        return type(x).__module__.split(".")[0] == type(self.like).__module__.split(".")[0]


def exact_table(positions: Any, d: int, base: float = 10000.0) -> np.ndarray:
    """The paper's (vaswani) encoding of each position from mpmath at 60 digits, each value
    then the nearest float64 (within 2^-53 of it, relatively)."""
    with mpmath.workdps(60):
        omegas = [mpmath.power(mpmath.mpf(base), -mpmath.mpf(2 * k) / d) for k in range(d // 2)]
        rows = []
        for p in positions:
            mp_p = mpmath.mpf(float(p))  # the position value exactly as given
            row = []
            for w in omegas:
                a = mp_p * w
                row += [float(mpmath.sin(a)), float(mpmath.cos(a))]
            rows.append(row)
    return np.array(rows, dtype=np.float64).reshape(len(rows), d)


def rotated(
    x: Any,
    positions: Any,
    dim: int,
    *,
    base: float = 10000.0,
    layout: str = "halves",
    heads_first: bool = True,
) -> np.ndarray:
    """``x`` (a torch tensor) rotated in float64 from the formula: pair ``i`` of the first
    ``dim`` channels turns by ``p * base**(-2i/dim)``, the other channels pass through.
    ``layout``: pairs ``(i, i + dim/2)`` ("halves") or ``(2i, 2i+1)`` ("interleaved").
    ``positions``: ``[b, s]`` or ``[s]`` (or ``[t]`` for ``[t, h, d]`` x); the head axis of a
    4-D ``x`` before the sequence (``heads_first``) or after it."""
    x = x.double().numpy()
    pos = np.asarray(positions, dtype=np.float64)
    theta = pos[..., None] * base ** (-np.arange(0, dim, 2) / dim)
    cos, sin = np.cos(theta), np.sin(theta)
    if x.ndim == 4 and heads_first:
        cos, sin = cos[..., None, :, :], sin[..., None, :, :]
    else:  # [b, s, h, d] or packed [t, h, d]: the head axis after the sequence
        cos, sin = cos[..., None, :], sin[..., None, :]
    n = dim // 2
    a, b = (slice(0, n), slice(n, dim)) if layout == "halves" else (
        slice(0, dim, 2), slice(1, dim, 2))  # fmt: skip
    out = x.copy()
    out[..., a] = x[..., a] * cos - x[..., b] * sin
    out[..., b] = x[..., b] * cos + x[..., a] * sin
    return out


def qk(
    *shape: int, heads_k: int = 2, dtype: Any = None, seed: int = 0, heads_first: bool = True
) -> tuple[Any, Any]:
    """Seeded query and key tensors of ``shape`` (float32 unless ``dtype``); the key with
    ``heads_k`` heads (grouped-query attention)."""
    import torch

    g = torch.Generator().manual_seed(seed)
    q = torch.randn(*shape, generator=g).to(dtype or torch.float32)
    kshape = list(shape)
    kshape[1 if len(shape) == 4 and heads_first else -2] = heads_k
    return q, torch.randn(*kshape, generator=g).to(dtype or torch.float32)


def compile_counter() -> Any:
    """A torch.compile backend that counts the graphs (frames) it compiles."""
    from torch._dynamo.testing import CompileCounter

    return CompileCounter()


def hf_rotary_module(config: Any) -> Any:
    """transformers' own rotary module for ``config`` (its text model's for multimodal
    families): the ``<Model>RotaryEmbedding`` class of ``config.model_type``'s module."""
    base = config.model_type.removesuffix("_text")
    mod = importlib.import_module(f"transformers.models.{base}.modeling_{base}")
    names = sorted(
        (n for n in dir(mod) if n.endswith("RotaryEmbedding") and "Vision" not in n),
        key=lambda n: ("Text" not in n, n),
    )
    return getattr(mod, names[0])(config)


# the originals' own float32 tables, as published ----------------------------------------


def tutorial_table(max_len: int, d_model: int) -> Any:
    """The PyTorch tutorial's PositionalEncoding buffer ``pe``, ``[max_len, 1, d_model]``."""
    import torch

    position = torch.arange(max_len).unsqueeze(1)
    div_term = torch.exp(torch.arange(0, d_model, 2) * (-math.log(10000.0) / d_model))
    pe = torch.zeros(max_len, 1, d_model)
    pe[:, 0, 0::2] = torch.sin(position * div_term)
    pe[:, 0, 1::2] = torch.cos(position * div_term)
    return pe


def whisper_float32(length: int, channels: int) -> Any:
    """Whisper's ``sinusoids``."""
    import torch

    inc = np.log(10000) / (channels // 2 - 1)
    inv = torch.exp(-inc * torch.arange(channels // 2))
    scaled = torch.arange(length)[:, np.newaxis] * inv[np.newaxis, :]
    return torch.cat([torch.sin(scaled), torch.cos(scaled)], dim=1)


def fairseq_float32(num_embeddings: int, dim: int, padding_idx: int) -> Any:
    """fairseq's ``SinusoidalPositionalEmbedding.get_embedding``, in float32 as it runs."""
    import torch

    half = dim // 2
    emb = math.log(10000) / (half - 1)
    emb = torch.exp(torch.arange(half, dtype=torch.float) * -emb)
    emb = torch.arange(num_embeddings, dtype=torch.float).unsqueeze(1) * emb.unsqueeze(0)
    emb = torch.cat([torch.sin(emb), torch.cos(emb)], dim=1).view(num_embeddings, -1)
    emb[padding_idx, :] = 0
    return emb


def onnx_session(module: Any, args: tuple[Any, ...], dynamic_shapes: Any, path: Any) -> Any:
    """``module`` exported to ONNX (the dynamo exporter) at ``path``, and an onnxruntime
    session on it with its input names (skipped without onnxruntime and onnxscript)."""
    import torch

    ort = pytest.importorskip("onnxruntime")
    pytest.importorskip("onnxscript")
    program = torch.onnx.export(
        module, args, dynamic_shapes=dynamic_shapes, dynamo=True, verbose=False
    )
    program.save(str(path))
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return session, [i.name for i in session.get_inputs()]
