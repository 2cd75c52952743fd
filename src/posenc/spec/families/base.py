"""What a family record holds (:class:`Family`, :class:`Audit`) and the helpers the records
share (how a head splits into axis blocks, patch-centre coordinates).

This module imports no record: :mod:`posenc.spec.families` collects them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from posenc.errors import PosencError
from posenc.spec.presets.base import RotaryPreset

Config = Mapping[str, Any]
"""A model's ``config.json``, as read from disk."""


def _head(cfg: Config) -> int:
    return int(cfg.get("attention_head_dim") or 128)


def _nothing(cfg: Config) -> dict[str, Any]:
    return {}


TOWER = "a vision tower: posenc audit builds the model from its config and asks patch"
"""Why a transformers (or timm) vision tower has no :class:`Audit` entry."""


@dataclass(frozen=True)
class Classes:
    """Module classes of one library that one recogniser of :func:`posenc.torch.patch` takes
    (``@by_class(wan.BUFFERS)``: a ``Classes`` constant of the family's record): the classes
    are named there, and nowhere else.

    Examples:
        >>> Classes("diffusers", "WanRotaryPosEmbed").names
        ('WanRotaryPosEmbed',)
    """

    library: str
    names: tuple[str, ...]

    def __init__(self, library: str, *names: str) -> None:
        object.__setattr__(self, "library", library)
        object.__setattr__(self, "names", names)


@dataclass(frozen=True)
class Audit:
    """What ``posenc audit`` measures for a model of the family read from its config (the
    library not installed, or no model built): the original's tables against the exact ones,
    on the grid of the size the family is run at (a config holds no resolution).

    Attributes:
        models: the diffusers ``_class_name``\\ s it reads.
        preset: the preset measured.
        where: the module, as ``attribute (Class)``.
        grid: the grid measured, and ``grid_words``: what it is (``"720p, 81 frames"``).
        original: what the original computes in, in words.
        dim: the rotary width, read from the config; ``keywords``: the ``rope_grid``
            keywords the config sets.
        compat: the ``compat=`` mode of the original; ``also``: other modes and where they
            apply (``("diffusers-mps", "on a host with MPS")``).
        buffers: the original keeps its tables in buffers (``model.to(bfloat16)`` rounds them).
        fix: ``"patch"`` (``posenc.torch.patch``) or ``"pipeline"`` (the pipeline computes
            the tables: pass posenc's).
        largest: the largest position, when not the grid's last index.
        ids: the tables are a FLUX-style ``rope`` of ``[N, k]`` ids, not a grid (``grid`` is
            the side of the square image measured).
        pixels: pixels per token a side (the VAE's compression times the patch), and
            ``frames``: video frames per latent frame (``(F - 1) // frames + 1``; 0: the grid's
            first axis is not frames and stays): how ``posenc audit --size`` finds the grid
            of a size.
        at_size: ``(config, rows, columns) -> keywords`` the pipeline's own positions add at
            a grid of that size (HunyuanDiT's and CogVideoX 1.0's crops of their base grid,
            Kandinsky 5's ``scale_factor``), under ``keywords``; None: none.
    """

    models: tuple[str, ...]
    preset: RotaryPreset
    where: str
    grid: tuple[int, ...]
    grid_words: str
    original: str
    dim: Callable[[Config], int] = _head
    keywords: Callable[[Config], dict[str, Any]] = _nothing
    compat: str = "diffusers"
    buffers: bool = False
    also: tuple[tuple[str, str], ...] = ()
    fix: str = "patch"
    largest: float | None = None
    ids: bool = False
    pixels: int = 16
    frames: int = 4
    at_size: Callable[[Config, int, int], dict[str, Any]] | None = None

    def grid_at(self, width: int, height: int, frames: int | None) -> tuple[int, ...]:
        """The grid of tokens of an image (or video of ``frames`` frames) of ``width`` x
        ``height`` pixels: the rows and columns at ``pixels`` a token, the frames at
        ``frames`` a latent frame (the audit's own when not given); a size below one token
        is an error naming it."""
        spatial = (height // self.pixels, width // self.pixels)
        if min(spatial) < 1:
            raise PosencError(
                f"--size {width}x{height}: {self.preset.name} takes {self.pixels} pixels a "
                f"token, so at least {self.pixels}x{self.pixels}"
            )
        if len(self.grid) == 2 or self.ids:
            return spatial
        first = self.grid[0]
        if self.frames and frames is not None:
            first = (frames - 1) // self.frames + 1
        return (first, *spatial)


@dataclass(frozen=True)
class Trained:
    """The size a preset's models were trained at: what the rules past it take by default
    (``posenc.rope_grid(..., scaling=(…))``, one rule per axis: RIFLEx's pair and length,
    vision YaRN's and DyPE's trained extent and scale).

    Attributes:
        preset: the preset.
        grid: tokens per grid axis at the trained size (None: an axis whose extent the
            training does not fix, e.g. FLUX's text axis).
        repeats_at: the latent frame at which the family's videos repeat (RIFLEx's ``N``,
            from which its intrinsic pair is found), where known.
        source: where the numbers come from, in words.
        extend: per grid axis, the rule that extends it past the trained size as the
            family's references do (``posenc audit --size`` prints it); default: RIFLEx on
            the frames of a family whose videos repeat, vision YaRN on rows and columns.
        noise_timestep: the ``timestep`` its diffusers transformer's forward receives at pure
            noise (the diffusion time 1, from which a rule that follows the time reads it in
            a patched model): 1000 where the pipeline passes the scheduler's timesteps (Wan,
            HunyuanVideo, CogVideoX), 1 where it passes them over 1000 (FLUX, Qwen-Image);
            None where its pipelines disagree (Cosmos 1's EDM ``log sigma / 4``, Cosmos 2's
            ``sigma / (sigma + 1)``) or posenc has not read them.
    """

    preset: RotaryPreset
    grid: tuple[int | None, ...]
    repeats_at: int | None = None
    source: str = ""
    extend: tuple[str, ...] = ()
    noise_timestep: float | None = None


@dataclass(frozen=True)
class Row:
    """A preset's row of the docs' family tables (``docs/rope-vision.md``, generated from the
    records at build time): ``section`` names the table (``"diffusers grids"``, ``"diffusers
    ids"``, ``"transformers"``, ``"timm"``); ``base``, ``layout`` and ``compat`` are the
    preset's own (its ``rotary`` keywords, its ``replays``) unless given, in words."""

    preset: RotaryPreset
    section: str
    models: str
    blocks: str
    coordinates: str
    base: str = ""
    layout: str = ""
    compat: str = ""


def _as_built(arch: str, grid: tuple[int, int]) -> tuple[dict[str, Any], float | None]:
    return {}, None


@dataclass(frozen=True)
class TimmAudit:
    """What ``posenc audit`` measures for a timm model read from its ``config.json``: the
    architectures whose name holds ``fragment`` (the longest fragment of any record wins), at
    the size of its ``pretrained_cfg``.

    Attributes:
        fragment: a part of the architecture's name (``"eva02"``, ``"_rope_reg"``).
        preset: the preset measured.
        positions: ``(architecture, grid) -> (rope_grid keywords, largest position or
            None)``: the model's coordinates at that grid.
        buffers: a model of a fixed size keeps its table in a buffer (``model.to(bfloat16)``
            rounds it).
    """

    fragment: str
    preset: RotaryPreset
    positions: Callable[[str, tuple[int, int]], tuple[dict[str, Any], float | None]] = _as_built
    buffers: bool = False


@dataclass(frozen=True)
class Family:
    """One family of image or video models (or a few close ones), in one place: everything
    posenc knows about it, which the presets, ``compat=``, ``patch``, ``posenc audit`` and the
    docs read.

    Attributes:
        name: how the docs name it.
        presets: its rotary presets (each with its ``compat=`` replays and the rows its
            original keeps: :class:`~posenc.spec.presets.base.RotaryPreset`).
        classes: its positional module classes (each group one recogniser's of
            ``posenc.torch.patch``): what ``patch`` replaces or reports.
        audits: what ``posenc audit`` measures for its models read from their configs.
        unaudited: why it has no audit entry, where it has none.
        trained: the sizes its presets' models were trained at (:class:`Trained`).
        docs: its presets' rows of the docs' family tables.

    Examples:
        >>> from posenc.spec.families import FAMILIES
        >>> wan = FAMILIES["wan"]
        >>> [p.name for p in wan.presets], wan.audits[0].grid
        (['wan'], (21, 45, 80))
    """

    name: str
    presets: tuple[RotaryPreset, ...]
    classes: tuple[Classes, ...] = ()
    audits: tuple[Audit | TimmAudit, ...] = ()
    unaudited: str = ""
    trained: tuple[Trained, ...] = ()
    docs: tuple[Row, ...] = ()


# --- how a head splits into blocks, and coordinates ----------------------------------------------


def split(name: str, dim: int, rule: str, widths: tuple[int, ...]) -> dict[str, Any]:
    """``{"axes_dim": widths}``, or the error naming the family's rule when ``dim`` does not
    split into even blocks by it."""
    if any(w <= 0 or w % 2 for w in widths) or sum(widths) != dim:
        raise PosencError(
            f"`dim` = {dim} does not split into {name}'s even blocks ({rule}): got {widths}"
        )
    return {"axes_dim": widths}


def two_blocks(name: str) -> Callable[[int, float], dict[str, Any]]:
    """``(dim, base) -> {"axes_dim": (dim / 2, dim / 2)}``: two axes, ``dim / 4`` frequencies
    each (the 2D families), or the error naming the rule when ``dim`` is not a multiple of 4."""

    def axial(dim: int, base: float) -> dict[str, Any]:
        return split(name, dim, "dim / 2 per axis, dim a multiple of 4", (dim // 2, dim // 2))

    return axial


def centred(dims: tuple[int, ...]) -> tuple[list[float], list[float]]:
    """Patch centres ``((i + 0.5) / n) * 2 - 1`` per axis (DINOv3): step ``2 / n``, the start
    minus the middle offset times the step, so an odd axis's middle patch is at exactly 0."""
    steps = [2.0 / n if n else 1.0 for n in dims]
    return [-((n - 1) / 2) * s for n, s in zip(dims, steps, strict=True)], steps


def axes(
    key: str, default: tuple[int, ...], theta: float | None = None, theta_key: str = "rope_theta"
) -> Callable[..., Any]:
    """An :class:`Audit`'s ``keywords``: the blocks a config sets under ``key`` (and its base
    under ``theta_key``, when ``theta`` is the family's default)."""

    def read(cfg: Config) -> dict[str, Any]:
        kw: dict[str, Any] = {"axes_dim": tuple(int(a) for a in cfg.get(key) or default)}
        if theta is not None:
            kw["base"] = float(cfg.get(theta_key) or theta)
        return kw

    return read


def crop_region(grid: tuple[int, int], base: tuple[int, int]) -> tuple[tuple[int, int], ...]:
    """diffusers' ``get_resize_crop_region_for_grid``: the crop of a ``base`` grid (rows,
    columns) that a grid of another aspect ratio is resized into, as ``rope_grid``'s ``crop``."""
    (h, w), (th, tw) = grid, base
    if h / w > th / tw:
        rows, cols = th, round(th / h * w)
    else:
        rows, cols = round(tw / w * h), tw
    top, left = round((th - rows) / 2.0), round((tw - cols) / 2.0)
    return (top, left), (top + rows, left + cols)


def width(key: str, default: tuple[int, ...]) -> Callable[[Config], int]:
    """An :class:`Audit`'s ``dim``: the sum of the blocks a config sets under ``key``."""
    return lambda cfg: sum(int(a) for a in cfg.get(key) or default)
