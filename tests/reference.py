"""Independent float64 references, one per original, written from the originals' formulas.

Each function follows the structure of the code it names (same loops, same concatenation
order, same quirks) but computes in float64, so it is the exact value up to ~1e-15. None of
them uses posenc.
"""

from __future__ import annotations

import math

import numpy as np


def vaswani(length: int, d: int, base: float = 1e4, offset: float = 0) -> np.ndarray:
    # PyTorch tutorial / labml: div_term = exp(arange(0, d, 2) * -(log(base) / d))
    pos = np.arange(length, dtype=np.float64)[:, None] + offset
    div = np.exp(np.arange(0, d, 2, dtype=np.float64) * -(math.log(base) / d))
    pe = np.zeros((length, d))
    pe[:, 0::2] = np.sin(pos * div)
    pe[:, 1::2] = np.cos(pos * div)
    return pe


def t2t_1d(length, channels, min_timescale=1.0, max_timescale=1e4, start_index=0):
    position = np.arange(length, dtype=np.float64) + start_index
    num_timescales = channels // 2
    inc = math.log(max_timescale / min_timescale) / max(num_timescales - 1, 1)
    inv = min_timescale * np.exp(np.arange(num_timescales, dtype=np.float64) * -inc)
    scaled = position[:, None] * inv[None, :]
    signal = np.concatenate([np.sin(scaled), np.cos(scaled)], axis=1)
    return np.pad(signal, [[0, 0], [0, channels % 2]])


def fairseq(num_embeddings, embedding_dim, padding_idx=None, offset=0):
    half = embedding_dim // 2
    emb = math.log(10000) / (half - 1)
    emb = np.exp(np.arange(half, dtype=np.float64) * -emb)
    position = np.arange(num_embeddings, dtype=np.float64) + offset
    emb = position[:, None] * emb[None, :]
    emb = np.concatenate([np.sin(emb), np.cos(emb)], axis=1)
    if embedding_dim % 2 == 1:
        emb = np.concatenate([emb, np.zeros((num_embeddings, 1))], axis=1)
    if padding_idx is not None:
        emb[position == padding_idx, :] = 0
    return emb


def whisper(length, channels, max_timescale=10000, offset=0):
    assert channels % 2 == 0
    inc = np.log(max_timescale) / (channels // 2 - 1)
    inv = np.exp(-inc * np.arange(channels // 2))
    scaled = (np.arange(length) + np.float64(offset))[:, None] * inv[None, :]
    return np.concatenate([np.sin(scaled), np.cos(scaled)], axis=1)


def marian(n_pos, dim, offset=0):
    enc = np.array(
        [
            [(offset + pos) / np.power(10000, 2 * (j // 2) / dim) for j in range(dim)]
            for pos in range(n_pos)
        ]
    )
    out = np.zeros((n_pos, dim))
    sentinel = dim // 2 if dim % 2 == 0 else dim // 2 + 1
    out[:, 0:sentinel] = np.sin(enc[:, 0::2])
    out[:, sentinel:] = np.cos(enc[:, 1::2])
    return out


def timestep(t, dim, flip_sin_to_cos=False, downscale_freq_shift=1, scale=1, max_period=10000):
    t = np.asarray(t, dtype=np.float64)
    half = dim // 2
    exponent = -math.log(max_period) * np.arange(half, dtype=np.float64)
    exponent = exponent / (half - downscale_freq_shift)
    emb = t[:, None] * np.exp(exponent)[None, :]
    emb = scale * emb
    emb = np.concatenate([np.sin(emb), np.cos(emb)], axis=-1)
    if flip_sin_to_cos:
        emb = np.concatenate([emb[:, half:], emb[:, :half]], axis=-1)
    if dim % 2 == 1:
        emb = np.pad(emb, [(0, 0), (0, 1)])
    return emb


def _1d_from_grid(embed_dim, pos):
    assert embed_dim % 2 == 0
    omega = np.arange(embed_dim // 2, dtype=np.float64) / (embed_dim / 2.0)
    omega = 1.0 / 10000**omega
    out = np.einsum("m,d->md", pos.reshape(-1), omega)
    return np.concatenate([np.sin(out), np.cos(out)], axis=1)


def _2d_from_grid(embed_dim, grid):
    assert embed_dim % 2 == 0
    emb_h = _1d_from_grid(embed_dim // 2, grid[0])
    emb_w = _1d_from_grid(embed_dim // 2, grid[1])
    return np.concatenate([emb_h, emb_w], axis=1)


def mae(embed_dim, grid_size, cls_token=False):
    h, w = (grid_size, grid_size) if isinstance(grid_size, int) else grid_size
    grid = np.meshgrid(np.arange(w, dtype=np.float64), np.arange(h, dtype=np.float64))
    pe = _2d_from_grid(embed_dim, np.stack(grid, axis=0))
    if cls_token:
        pe = np.concatenate([np.zeros([1, embed_dim]), pe], axis=0)
    return pe


def diffusers_2d(
    embed_dim, grid_size, cls_token=False, extra_tokens=0, interpolation_scale=1.0, base_size=16
):
    if isinstance(grid_size, int):
        grid_size = (grid_size, grid_size)
    grid_h = np.arange(grid_size[0], dtype=np.float64) / (grid_size[0] / base_size)
    grid_h = grid_h / interpolation_scale
    grid_w = np.arange(grid_size[1], dtype=np.float64) / (grid_size[1] / base_size)
    grid_w = grid_w / interpolation_scale
    grid = np.stack(np.meshgrid(grid_w, grid_h), axis=0)
    grid = grid.reshape([2, 1, grid_size[1], grid_size[0]])
    pe = _2d_from_grid(embed_dim, grid)
    if cls_token and extra_tokens > 0:
        pe = np.concatenate([np.zeros([extra_tokens, embed_dim]), pe], axis=0)
    return pe


def diffusers_3d(
    embed_dim,
    spatial_size,
    temporal_size,
    spatial_interpolation_scale=1.0,
    temporal_interpolation_scale=1.0,
):
    if isinstance(spatial_size, int):
        spatial_size = (spatial_size, spatial_size)
    dim_s, dim_t = 3 * embed_dim // 4, embed_dim // 4
    grid_h = np.arange(spatial_size[1], dtype=np.float64) / spatial_interpolation_scale
    grid_w = np.arange(spatial_size[0], dtype=np.float64) / spatial_interpolation_scale
    grid = np.stack(np.meshgrid(grid_w, grid_h), axis=0)
    grid = grid.reshape([2, 1, spatial_size[1], spatial_size[0]])
    spatial = _2d_from_grid(dim_s, grid)
    grid_t = np.arange(temporal_size, dtype=np.float64) / temporal_interpolation_scale
    temporal = _1d_from_grid(dim_t, grid_t)
    spatial = np.repeat(spatial[None], temporal_size, axis=0)
    temporal = np.repeat(temporal[:, None], spatial_size[0] * spatial_size[1], axis=1)
    return np.concatenate([temporal, spatial], axis=-1)


def timm_2d(feat_shape, dim=64, temperature=10000.0, reverse_coord=False, interleave_sin_cos=False):
    assert dim % 4 == 0
    pos_dim = dim // 4
    bands = 1.0 / (temperature ** (np.arange(pos_dim, dtype=np.float64) / pos_dim))
    if reverse_coord:
        feat_shape = feat_shape[::-1]
    grid = (
        np.stack(np.meshgrid(*[np.arange(s, dtype=np.float64) for s in feat_shape], indexing="ij"))
        .reshape(2, -1)
        .T
    )
    pos2 = grid[:, :, None] * bands[None, None, :]
    stack_dim = 2 if interleave_sin_cos else 1
    emb = np.stack([np.sin(pos2), np.cos(pos2)], axis=stack_dim)
    return emb.reshape(emb.shape[0], -1)


def hf_2d(height, width, embed_dim=256, temperature=10000.0, cls_token=False):
    grid_h, grid_w = np.meshgrid(
        np.arange(height, dtype=np.float64), np.arange(width, dtype=np.float64), indexing="ij"
    )
    pos_dim = embed_dim // 4
    omega = 1.0 / temperature ** (np.arange(pos_dim) / pos_dim)
    out_h = grid_h.reshape(-1)[:, None] * omega[None]
    out_w = grid_w.reshape(-1)[:, None] * omega[None]
    pe = np.concatenate([np.sin(out_h), np.cos(out_h), np.sin(out_w), np.cos(out_w)], axis=1)
    return np.concatenate([np.zeros((1, embed_dim)), pe]) if cls_token else pe


def detr(mask, num_pos_feats=64, temperature=10000, normalize=False, scale=None):
    if scale is None:
        scale = 2 * math.pi
    not_mask = ~np.asarray(mask)
    y_embed = np.cumsum(not_mask, axis=1, dtype=np.float64)
    x_embed = np.cumsum(not_mask, axis=2, dtype=np.float64)
    if normalize:
        eps = 1e-6
        y_embed = y_embed / (y_embed[:, -1:, :] + eps) * scale
        x_embed = x_embed / (x_embed[:, :, -1:] + eps) * scale
    dim_t = np.arange(num_pos_feats, dtype=np.float64)
    dim_t = temperature ** (2 * (dim_t // 2) / num_pos_feats)
    pos_x = x_embed[..., None] / dim_t
    pos_y = y_embed[..., None] / dim_t
    b, h, w = not_mask.shape
    pos_x = np.stack((np.sin(pos_x[..., 0::2]), np.cos(pos_x[..., 1::2])), axis=4)
    pos_y = np.stack((np.sin(pos_y[..., 0::2]), np.cos(pos_y[..., 1::2])), axis=4)
    pos_x = pos_x.reshape(b, h, w, -1)
    pos_y = pos_y.reshape(b, h, w, -1)
    return np.concatenate((pos_y, pos_x), axis=3).transpose(0, 3, 1, 2)


def t2t_nd(shape, channels, min_timescale=1.0, max_timescale=1e4):
    num_dims = len(shape)
    num_timescales = channels // (num_dims * 2)
    inc = math.log(max_timescale / min_timescale) / (num_timescales - 1)
    inv = min_timescale * np.exp(np.arange(num_timescales, dtype=np.float64) * -inc)
    x = np.zeros((*shape, channels))
    for dim in range(num_dims):
        position = np.arange(shape[dim], dtype=np.float64)
        scaled = position[:, None] * inv[None, :]
        signal = np.concatenate([np.sin(scaled), np.cos(scaled)], axis=1)
        prepad = dim * 2 * num_timescales
        postpad = channels - (dim + 1) * 2 * num_timescales
        signal = np.pad(signal, [[0, 0], [prepad, postpad]])
        signal = signal.reshape(
            (1,) * dim + (shape[dim],) + (1,) * (num_dims - 1 - dim) + (channels,)
        )
        x = x + signal
    return x.reshape(-1, channels)


def tatp22(shape, org_channels, offset=0):
    nd = len(shape)
    channels = int(np.ceil(org_channels / (2 * nd)) * 2)
    inv_freq = 1.0 / (10000 ** (np.arange(0, channels, 2, dtype=np.float64) / channels))
    emb = np.zeros((*shape, channels * nd))
    for a, n in enumerate(shape):
        sin_inp = np.einsum("i,j->ij", np.arange(n, dtype=np.float64) + offset, inv_freq)
        e = np.stack((np.sin(sin_inp), np.cos(sin_inp)), axis=-1).reshape(n, -1)
        e = e.reshape((1,) * a + (n,) + (1,) * (nd - 1 - a) + (channels,))
        emb[..., a * channels : (a + 1) * channels] = e
    return emb[..., :org_channels].reshape(-1, org_channels)


def nerf(x, multires, include_input=True):
    x = np.asarray(x, dtype=np.float64)
    freqs = 2.0 ** np.linspace(0.0, multires - 1, multires)
    out = [x] if include_input else []
    for f in freqs:
        for fn in (np.sin, np.cos):
            out.append(fn(x * f))
    return np.concatenate(out, axis=-1)


# the 1D presets: preset -> (float64 reference of rows offset..offset+n-1, the widths it takes)
ONE_D = {
    "vaswani": (lambda n, d, off: vaswani(n, d, offset=off), "even"),
    "tensor2tensor": (lambda n, d, off: t2t_1d(n, d, start_index=off), "any"),
    "fairseq": (lambda n, d, off: fairseq(n, d, padding_idx=1, offset=off), "any"),
    "whisper": (lambda n, d, off: whisper(n, d, offset=off), "even"),
    "marian": (lambda n, d, off: marian(n, d, offset=off), "any"),
    "timestep": (lambda n, d, off: timestep(off + np.arange(n, dtype=np.float64), d), "any"),
    "tatp22": (lambda n, d, off: tatp22((n,), d, offset=off), "any"),
}
ONE_D_OPTIONS = {"fairseq": {"padding_idx": 1}}  # posenc's options for those references


def axial_rope(dims, axes_dim, base, blocks, positions, layout="interleaved"):
    """float64 (cos, sin) ``[prod(dims), sum(axes_dim)]``: block ``a`` encodes grid axis
    ``blocks[a]`` at ``positions[blocks[a]]`` with frequencies ``base ** (-2j / d_a)``."""
    grids = np.meshgrid(*[np.asarray(p, dtype=np.float64) for p in positions], indexing="ij")
    coords = [g.reshape(-1) for g in grids]
    angles = []
    for d, g in zip(axes_dim, blocks, strict=True):
        omega = base ** (-np.arange(0, d, 2, dtype=np.float64) / d)
        angles.append(coords[g][:, None] * omega[None])
    theta = np.concatenate(angles, axis=1)
    if layout == "interleaved":
        theta = np.repeat(theta, 2, axis=1)
    else:
        theta = np.concatenate([theta, theta], axis=1)
    return np.cos(theta), np.sin(theta)


def ltx_rope(dims, dim, steps):
    """LTX-Video from its formula in float64: coordinates -1 + i * step per axis, frequencies
    (pi / 2) * 1e4 ** (k / (n - 1)), (t, h, w) per frequency, pairs, dim % 6 still channels
    first."""
    n = dim // 6
    ladder = np.pi / 2 * 1e4 ** (np.arange(n) / (n - 1))
    grids = np.meshgrid(*[-1 + st * np.arange(m) for st, m in zip(steps, dims, strict=True)],
                        indexing="ij")  # fmt: skip
    coords = np.stack([g.reshape(-1) for g in grids], axis=-1)  # [N, 3]
    theta = (ladder[None, :, None] * coords[:, None, :]).reshape(len(coords), -1)
    theta = np.concatenate([np.zeros((len(coords), (dim % 6) // 2)), theta], axis=1)
    theta = np.repeat(theta, 2, axis=1)
    return np.cos(theta), np.sin(theta)


# --- timm's rotary tables and the vision towers', shared by the family test files -------------


def timm_axial_embed(grid, *, base=1e4, ref=None, halves=False, columns_first=False,
                     centred=False, dim=64):  # fmt: skip
    """float64 ``cat(sin, cos)`` of timm's two-axis RoPE (``dim / 4`` bands per axis)."""
    axes = []
    for g, n in enumerate(grid):
        i = np.arange(n, dtype=np.float64)
        axes.append((i + 0.5) / n * 2 - 1 if centred else i * ref[g] / n if ref else i)
    rows, cols = (a.reshape(-1) for a in np.meshgrid(*axes, indexing="ij"))
    k = np.arange(dim // 4, dtype=np.float64)
    omega = 2 * math.pi / base ** (2 * k / (dim // 2)) if centred else base ** (-k / (dim // 4))
    first, second = (cols, rows) if columns_first else (rows, cols)
    theta = np.concatenate([first[:, None] * omega, second[:, None] * omega], 1)
    theta = np.concatenate([theta, theta], 1) if halves else np.repeat(theta, 2, 1)
    return np.concatenate([np.sin(theta), np.cos(theta)], 1)


def timm_mrope_embed(grid, dim=64, base=1e4, section=(8, 12, 12)):
    """float64 ``cat(sin, cos)`` of timm's MRoPE: one ladder ``base ** (-2j / dim)``, ``j % 3 ==
    1`` on the row and ``2`` on the column (below ``3 * section``), the rest at 0; halves."""
    j = np.arange(dim // 2)
    omega = base ** (-2.0 * j / dim)
    mesh = np.meshgrid(np.arange(grid[0]), np.arange(grid[1]), indexing="ij")
    ys, xs = (a.reshape(-1).astype(np.float64) for a in mesh)
    pos = np.zeros((ys.size, j.size))
    pos[:, (j % 3 == 1) & (j < 3 * section[1])] = ys[:, None]
    pos[:, (j % 3 == 2) & (j < 3 * section[2])] = xs[:, None]
    theta = np.concatenate([pos * omega] * 2, 1)
    return np.concatenate([np.sin(theta), np.cos(theta)], 1)


def timm_axial_rope(grid, dim=64, *, base, ref=None, offset=0.0, columns_first=False,
                    halves=False, centred=False):  # fmt: skip
    """float64 ``(sin, cos)`` ``[H * W, dim]`` of timm's two-axis RoPE: per axis ``dim / 4``
    frequencies, ``base ** (-k / (dim / 4))`` at positions ``(i + offset) * ref / n`` (or ``i +
    offset``), or DINOv3's ``2 pi / base ** (2k / (dim / 2))`` at ``((i + 0.5 + offset) / n) *
    2 - 1``; the row block first unless ``columns_first``, each frequency twice in a row
    (interleaved) or in both halves."""
    axes = []
    for g, n in enumerate(grid):
        i = np.arange(n, dtype=np.float64)
        if centred:
            axes.append((i + 0.5 + offset) / n * 2.0 - 1.0)
        elif ref is not None:
            axes.append((i + offset) * ref[g] / n)
        else:
            axes.append(i + offset)
    rows, cols = (a.reshape(-1) for a in np.meshgrid(*axes, indexing="ij"))
    k = np.arange(dim // 4, dtype=np.float64)
    omega = 2.0 * math.pi / base ** (2.0 * k / (dim // 2)) if centred else base ** (-k / (dim // 4))
    first, second = (cols, rows) if columns_first else (rows, cols)
    theta = np.concatenate([first[:, None] * omega, second[:, None] * omega], axis=1)
    theta = np.concatenate([theta, theta], 1) if halves else np.repeat(theta, 2, axis=1)
    return np.sin(theta), np.cos(theta)


def numpy_crop(start, stop, n):
    """The original code's crop grid (numpy.linspace(start, stop, n, endpoint=False))."""
    return np.linspace(start, stop, n, endpoint=False)


def vision_tower_rope(family, h, w, dim):
    """``(cos, sin)`` float64 ``[h * w, dim]``: tokens row-major, in the family's layout."""
    rows = np.repeat(np.arange(h, dtype=np.float64), w)
    cols = np.tile(np.arange(w, dtype=np.float64), h)
    quarter = np.arange(dim // 4, dtype=np.float64)
    if family == "pixtral":  # one ladder over dim; the row takes the even j, the column the odd
        ladder = 10000.0 ** (-2 * np.arange(dim // 2, dtype=np.float64) / dim)
        half = np.concatenate([np.outer(rows, ladder[0::2]), np.outer(cols, ladder[1::2])], 1)
        angles = np.concatenate([half, half], 1)
    elif family == "qwen2-vl-vision":
        omega = 10000.0 ** (-2 * quarter / (dim // 2))
        half = np.concatenate([np.outer(rows, omega), np.outer(cols, omega)], 1)
        angles = np.concatenate([half, half], 1)
    elif family == "dinov3":
        omega = 100.0 ** (-4 * quarter / dim)
        y = (rows + 0.5) / h * 2 - 1
        x = (cols + 0.5) / w * 2 - 1
        half = 2 * np.pi * np.concatenate([np.outer(y, omega), np.outer(x, omega)], 1)
        angles = np.concatenate([half, half], 1)
    elif family in ("sam2", "sam3-vit"):  # SAM 3: at the 24-wide window's scale
        omega = 10000.0 ** (-2 * quarter / (dim // 2))
        scale = 1.0 if family == "sam2" else 24 / w
        block = np.concatenate([np.outer(cols * scale, omega), np.outer(rows * scale, omega)], 1)
        angles = np.repeat(block, 2, axis=1)
    else:  # llama4-vision: 1-based (x, y)
        omega = 10000.0 ** (-2 * quarter / (dim // 2))
        block = np.concatenate([np.outer(cols + 1, omega), np.outer(rows + 1, omega)], 1)
        angles = np.repeat(block, 2, axis=1)
    return np.cos(angles), np.sin(angles)


# --- rules past the trained size (ROPE-EXTRAPOLATION.md beside the project) -------------------


def ladder(d, base):
    """A block's frequencies ``base ** (-2j / d)``, float64."""
    return base ** (-np.arange(0, d, 2, dtype=np.float64) / d)


def riflex_ladder(d, base, k, length, scale=0.9):
    """RIFLEx: the ladder with pair ``k`` (1-based) lowered to ``scale * 2 pi / length``."""
    out = ladder(d, base)
    out[k - 1] = scale * 2 * math.pi / length
    return out


def pair_at(r, d, base, length):
    """The catalogue's c(r): the real pair index at which r rotations fit in L tokens."""
    return d * math.log(length / (2 * math.pi * r)) / (2 * math.log(base))


def band(r0, r1, d, base, length):
    """The catalogue's ramp range ``(max(floor(c(r0)), 0), min(ceil(c(r1)), d - 1))``, clamped
    to the pairs."""
    n = d // 2
    lo = min(max(math.floor(pair_at(r0, d, base, length)), 0), n)
    hi = min(max(min(math.ceil(pair_at(r1, d, base, length)), d - 1), 0), n)
    return lo, hi


def yarn_ladder(s, kappa=1.0, d=56, base=1e4, length=64, *, power=None, s_glob=None):
    """The catalogue's vision YaRN (DyPE: thresholds times ``kappa = t ** 2``; ComfyUI-DyPE:
    thresholds raised to ``power = 2 t ** 2``): omega^pi = omega / s, omega^ntk the NTK-aware
    ladder (by ``s_glob``, default ``s``), blended by the beta ramp, then with the trained
    ladder by the gamma ramp."""
    j = np.arange(d // 2, dtype=np.float64)
    omega = ladder(d, base)
    at = (lambda r: r * kappa) if power is None else (lambda r: r**power)

    def ramp(r0, r1):
        lo, hi = band(at(r0), at(r1), d, base, length) if at(r0) > 0 else (d // 2,) * 2
        hi = hi + 0.001 if lo == hi else hi
        return np.clip((j - lo) / (hi - lo), 0, 1)

    rb, rg = ramp(1.25, 0.75), ramp(16, 2)
    aware = s if s_glob is None else s_glob
    first = omega / s * rb + ladder(d, base * aware ** (d / (d - 2))) * (1 - rb)
    return first * rg + omega * (1 - rg)


def yarn_magnitude(s):
    """Vision YaRN's magnitude ``0.1 ln s + 1`` past the trained size (1 within it)."""
    return 0.1 * math.log(s) + 1 if s > 1 else 1.0
