"""Issue 12's audit, class by class: every call either returns the exact value (compared with
the float64 references) or raises PosencError naming the argument, the rule and the value,
before any work."""

from __future__ import annotations

import math
import threading
import warnings

import numpy as np
import pytest

import posenc
from tests import reference as ref
from tests.helpers import as_float64, raises, within_float32

torch = pytest.importorskip("torch")

from posenc.torch import (  # noqa: E402
    GridEncoding,
    PositionalEncoding,
    SinusoidalEmbedding,
    Timesteps,
    packed_positions,
)


def custom(**fields) -> posenc.Preset:
    return posenc.Preset("custom", "a test", "a test", posenc.Encoding(**fields))


# -- silent wrong results -----------------------------------------------------------------------


@pytest.mark.parametrize("there_and_back", ["half", "bfloat16"])
def test_module_cache_follows_dtype_round_trips(there_and_back):
    m = PositionalEncoding(64)
    m = (m.half() if there_and_back == "half" else m.to(torch.bfloat16)).float()
    y = m(torch.zeros(1, 100, 64))[0]
    within_float32(y, ref.vaswani(100, 64))


def test_to_empty_without_reset_rebuilds_the_cache():
    m = PositionalEncoding(32, device="meta")
    m.to_empty(device="cpu")
    within_float32(m(torch.zeros(1, 10, 32))[0], ref.vaswani(10, 32))


@pytest.mark.parametrize(
    "dtype",
    [torch.uint8, torch.int8, torch.int16, torch.int32, torch.uint16, torch.uint32, torch.uint64],
)
def test_ids_of_every_integer_dtype(dtype):
    ids = torch.tensor([0, 0, 3, 1], dtype=dtype)
    want = ref.vaswani(4, 8)[[0, 0, 3, 1]]
    pe = PositionalEncoding(8, cached_length=4)
    within_float32(pe.encoding(torch.zeros(1, 4, 8), ids).reshape(4, 8), want)
    within_float32(SinusoidalEmbedding(8, cached_length=4)(ids), want)
    within_float32(posenc.encode(ids, 8), want)


def test_unsigned_ids_in_range_and_out_of_range():
    within_float32(posenc.encode(np.array([5], dtype=np.uint64), 8), ref.vaswani(6, 8)[5:])
    with raises("`positions`", "2^53", "18446744073709551615"):
        posenc.encode(np.array([2**64 - 1], dtype=np.uint64), 8)
    with raises("`positions`", "2^53"):
        posenc.encode([2**70], 8)
    with raises("`offset`", "<= 9007199254740992"):
        posenc.context_parallel_positions(4, 0, 1, offset=2**63 - 1)
    with raises("`offset` + `seq_len`", "2^53"):
        posenc.context_parallel_positions(4, 0, 1, offset=2**53 - 2)


@pytest.mark.parametrize("cu", [[2, 5], [0, 4, 2, 5], [0, 3, 4]])
def test_cu_seqlens_must_start_at_zero_never_decrease_and_end_at_the_tokens(cu):
    with raises("`cu_seqlens`", "start at 0", str(cu)):
        PositionalEncoding(8)(torch.zeros(5, 8), cu_seqlens=torch.tensor(cu))
    if cu[0] != 0 or cu != sorted(cu):
        with raises("`cu_seqlens`", "never decrease"):
            packed_positions(torch.tensor(cu))


# -- NaN or inf ---------------------------------------------------------------------------------


@pytest.mark.parametrize("bad", [math.inf, -math.inf, math.nan])
def test_non_finite_positions_are_refused_everywhere(bad):
    t = torch.tensor([1.0, bad])
    for call in (
        lambda: Timesteps(8)(t),
        lambda: PositionalEncoding(8)(torch.zeros(1, 2, 8), t),
        lambda: posenc.torch.encode(t, 8),
        lambda: posenc.encode(t.numpy(), 8),
    ):
        with raises("finite"):
            call()


def test_angles_just_inside_the_limit_are_exact():
    x = np.array([2.0**26, -(2.0**26) + 0.5])
    within_float32(posenc.encode(x, 8, dtype=np.float64), _direct_vaswani(x, 8))
    # NeRF: power-of-two frequencies make exact products, far past 2^27
    got = posenc.encode(np.array([3.0]), 1 + 2 * 40, preset="nerf")
    within_float32(got, ref.nerf(np.array([[3.0]]), 40)[0])


def _direct_vaswani(x: np.ndarray, d: int) -> np.ndarray:
    w = 1e4 ** (-np.arange(0, d, 2) / d)
    out = np.empty((len(x), d))
    out[:, 0::2] = np.sin(x[:, None] * w)
    out[:, 1::2] = np.cos(x[:, None] * w)
    return out


# -- hangs --------------------------------------------------------------------------------------


@pytest.mark.parametrize("shift", [16, 100, 1000])
def test_width_hint_is_quick_for_any_shift(shift):
    with raises("`dim` is too small", f"n - {shift}"):
        posenc.table(4, 8, preset="timestep", downscale_freq_shift=shift)


def test_many_axes_are_refused_quickly():
    with raises("`shape`", "at most 32 axes", "65"):
        posenc.grid((1,) * 65, 130, preset="t2t-nd")
    with raises("`shape`", "at most 32 axes"):
        posenc.grid((1,) * 64, 128, preset="tatp22")


# -- crashes of valid calls ---------------------------------------------------------------------


def test_odd_widths_on_torch():
    within_float32(
        posenc.table(64, 21, preset="nerf", dtype=torch.float32),
        ref.nerf(np.arange(64.0)[:, None], 10),
        scale=64,
    )
    got = posenc.encode(torch.tensor([[1, 2], [300, 4000]]), 63, preset="tatp22", ndim=2)
    want = posenc.encode(np.array([[1, 2], [300, 4000]]), 63, preset="tatp22", ndim=2)
    assert np.array_equal(as_float64(got), as_float64(want))
    m = PositionalEncoding(3, preset="nerf")
    y = m(torch.zeros(1, 5, 3))[0]
    within_float32(y, ref.nerf(np.arange(5.0)[:, None], 1), scale=5)


def test_detr_numpy_mask_with_a_torch_dtype():
    mask = np.zeros((1, 4, 5), dtype=bool)
    mask[:, :, 4] = True
    out = posenc.detr(mask, 32, dtype=torch.float32)
    assert isinstance(out, torch.Tensor)
    assert out.shape == (1, 32, 4, 5)
    within_float32(out, ref.detr(mask, 16), scale=8)


def test_meta_in_meta_out():
    for out, shape in [
        (PositionalEncoding(8)(torch.zeros(1, 3, 8, device="meta")), (1, 3, 8)),
        (PositionalEncoding(8)(torch.zeros(1, 5000, 8, device="meta")), (1, 5000, 8)),
        (posenc.encode(torch.zeros(3, dtype=torch.long, device="meta"), 8), (3, 8)),
        (posenc.table(3, 8, device="meta", dtype=torch.bfloat16), (3, 8)),
        (Timesteps(8)(torch.zeros(3, device="meta")), (3, 8)),
        (GridEncoding(16)(torch.zeros(1, 4, 16, device="meta"), (2, 2)), (1, 4, 16)),
    ]:
        assert out.is_meta
        assert tuple(out.shape) == shape
    assert posenc.table(3, 8, device="meta", dtype=torch.bfloat16).dtype == torch.bfloat16


def test_set_num_threads_while_others_compute():
    errors: list[BaseException] = []
    want = posenc.table(65536, 64)
    stop = threading.Event()

    def compute():
        try:
            while not stop.is_set():
                assert np.array_equal(posenc.table(65536, 64), want)
        except BaseException as err:
            errors.append(err)

    workers = [threading.Thread(target=compute) for _ in range(3)]
    for t in workers:
        t.start()
    try:
        for n in [2, 1, 3, 2, 1, 2] * 5:
            posenc.set_num_threads(n)
    finally:
        stop.set()
        for t in workers:
            t.join()
        posenc.set_num_threads(1)
    assert not errors, errors[0]


# -- wrong exception types ----------------------------------------------------------------------


def test_devices_that_do_not_exist():
    if torch.cuda.is_available():
        pytest.skip("this build has CUDA: the device exists")
    with raises("`device`", "'cuda'", "is_available"):
        posenc.table(4, 8, device="cuda")
    with raises("`device`", "torch device"):
        posenc.table(4, 8, device="nowhere")


def test_empty_grids_are_empty():
    out = posenc.grid((0, 4), 16, preset="diffusers-2d")
    assert out.shape == (0, 16)


# -- caches -------------------------------------------------------------------------------------


def test_caches_are_bounded_in_bytes():
    from posenc.evaluate.engine import ORDERS
    from posenc.evaluate.integers import LEVELS, TABLES
    from posenc.spec.layout import PLANS

    posenc.table(1, 2**19)
    for width in range(1000, 11000, 1000):
        posenc.table(3, width)
    for cache in (LEVELS, ORDERS, TABLES, PLANS):
        assert cache.size <= cache.limit
    assert LEVELS.size <= 64 << 20


def test_wide_tables_in_slices_are_the_same_bits():
    wide = posenc.table(300, 16384, dtype=np.float64)
    part = posenc.table(300, 16384, dtype=np.float64, channels=slice(8000, 8200))
    assert np.array_equal(wide[:, 8000:8200], part)
    within_float32(wide, ref.vaswani(300, 16384), scale=1)


@pytest.mark.parametrize("kind", ["numpy", "torch"])
def test_integer_like_channel_bounds_are_accepted(kind):
    if kind == "torch":
        torch = pytest.importorskip("torch")
        bounds = (torch.tensor(2).item(), torch.tensor(6).item())
    else:
        bounds = (np.int64(2), np.int32(6))
    got = posenc.table(3, 8, channels=slice(*bounds), dtype=np.float64)
    full = posenc.table(3, 8, dtype=np.float64)
    np.testing.assert_array_equal(got, full[:, 2:6])
    with pytest.raises(posenc.PosencError, match=r"`channels.start` must be an integer"):
        posenc.table(3, 8, channels=slice(2.0, 6))


def test_positions_that_require_grad_warn_nothing():
    torch = pytest.importorskip("torch")
    from posenc.torch import PositionalEncoding

    t = torch.tensor([0.5, 3.0], dtype=torch.float64, requires_grad=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = posenc.encode(t, 8, dtype=torch.float64)
        module = PositionalEncoding(8, dtype=torch.float64)
        module.eval()
        out = module(torch.zeros(1, 2, 8, dtype=torch.float64), positions=t)
    i = np.arange(4)
    want = np.zeros((2, 8))
    angles = np.array([0.5, 3.0])[:, None] * 10000.0 ** (-2 * i / 8)
    want[:, 0::2], want[:, 1::2] = np.sin(angles), np.cos(angles)
    np.testing.assert_allclose(got.detach().numpy(), want, rtol=0, atol=1e-15)
    np.testing.assert_allclose(out[0].detach().numpy(), want, rtol=0, atol=1e-15)


def test_plans_are_kept_by_their_numbers_not_their_label():
    """The same encoding asked for under two labels (a preset with and without an option
    that changes nothing) is one kept plan; each caller's messages name its own label."""
    from posenc.spec.layout import PLANS, plan

    enc = posenc.preset("vaswani").encoding
    before = len(PLANS.items)
    first = plan(enc, 24, 1, "'vaswani'")
    second = plan(enc, 24, 1, "'vaswani' with `base`=10000.0")
    assert len(PLANS.items) <= before + 1
    assert first.src is second.src
    assert first.memo is second.memo
    assert (first.label, second.label) == ("'vaswani'", "'vaswani' with `base`=10000.0")
    with pytest.raises(posenc.PosencError, match=r"preset 'vaswani' with `base`=10000.0"):
        posenc.table(2**26, 24, base=10000.0, offset=2**27)


def test_a_shared_plan_names_each_callers_label_in_device_checks():
    """Labelled copies of one kept plan share its numbers, not its messages: the accuracy
    rule checked on the device names the caller's own preset and options."""
    from posenc.spec.layout import channel_plan

    enc = posenc.preset("timestep").encoding
    plain = channel_plan(enc, 32, 1, "'timestep'", None)
    assert "preset 'timestep' is" in plain.angle_rule
    scaled = channel_plan(enc, 32, 1, "'timestep' with `scale`=1.0", None)
    assert scaled.memo is plain.memo
    assert "preset 'timestep' with `scale`=1.0 is" in scaled.angle_rule
