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
