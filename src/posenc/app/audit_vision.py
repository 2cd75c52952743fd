"""What ``posenc audit`` recognises of the image and video rotary embeddings in diffusers and
timm model configs: one :class:`~posenc.app.audit_models.Finding` per family's rotary module,
measured on the grid of the size the family is run at (the config holds no resolution).

What each family measures is its record's (:class:`posenc.spec.families.base.Audit`, by the
model classes it names; :class:`~posenc.spec.families.base.TimmAudit`, by a fragment of a timm
architecture's name): this module only reads them. The figure is the original's own float32
table (posenc's ``compat=`` replay of it, bit for bit with the original) against the exact
float64 one, over every token of that grid; where the original keeps its tables in buffers
(Wan), the bf16 figure is those buffers after ``model.to(torch.bfloat16)``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import numpy as np

from posenc.api.rope_grid import rope_grid
from posenc.app import audit_figures as fig
from posenc.app.audit_diffusers import FLOW_T, FLOW_WORDS, timestep
from posenc.app.audit_models import PATCH, Finding, _call
from posenc.errors import NotHeld
from posenc.spec.extrapolation import intrinsic_pair, riflex_period
from posenc.spec.families import FAMILIES, trained_of
from posenc.spec.families.base import Audit, TimmAudit
from posenc.spec.frequencies import paper
from posenc.spec.rotary import rotary
from posenc.spec.scaling import RULES

PIPELINE = (
    "the pipeline computes the tables: pass posenc's (the posenc call above, float32) as "
    "image_rotary_emb"
)
FIXES = {"patch": PATCH, "pipeline": PIPELINE}
"""An :class:`~posenc.spec.families.base.Audit`'s ``fix``, in words."""


@dataclass(frozen=True)
class Size:
    """The size ``posenc audit --size WIDTHxHEIGHT [--frames N]`` asks about: each image or
    video family is measured on the grid of tokens of that size instead of its own."""

    width: int
    height: int
    frames: int | None = None

    def words(self, axes: int = 3) -> str:
        """The size in words, its frames only for a grid that has them."""
        many = "" if self.frames == 1 else "s"
        frames = "" if self.frames is None or axes < 3 else f", {self.frames} frame{many}"
        return f"{self.width} x {self.height} pixels{frames}, the size asked"


VISION: dict[str, Audit] = {
    model: audit
    for record in FAMILIES.values()
    for audit in record.audits
    if isinstance(audit, Audit)
    for model in audit.models
}
"""diffusers ``_class_name`` → what its family's record measures."""

TIMM: dict[str, TimmAudit] = {
    audit.fragment: audit
    for record in FAMILIES.values()
    for audit in record.audits
    if isinstance(audit, TimmAudit)
}
"""A fragment of a timm architecture's name → what its family's record measures."""


# --- FLUX and the families of its ids ---------------------------------------------------------


def axial(
    component: str,
    axes_dim: tuple[int, ...],
    theta: float,
    side: int,
    audit: Audit,
    size: Size | None = None,
) -> Finding:
    """FLUX's ``FluxPosEmbed`` and its kind: axial rotary of ids, float64 on CPU/CUDA, float32
    on MPS/NPU; at a ``size``, its ids and what the pipeline's bfloat16 ids do there."""
    rows, cols = (side, side) if size is None else audit.grid_at(size.width, size.height, None)

    def measure() -> tuple[float | None, float | None, str | None]:
        a, mps = fig.axial_figures(axes_dim, theta, (rows, cols))
        notes = [f"on MPS/NPU diffusers computes in float32: error {mps:.3g} there"]
        if size is not None:
            notes += [n for n in (fig.bf16_ids(axes_dim, theta, max(rows, cols)),) if n]
            notes += [n for n in (_beyond(audit, (1, rows, cols), sum(axes_dim)),) if n]
        return a, None, "; ".join(notes)

    own = audit.preset.rotary
    extra: dict[str, Any] = {}
    if tuple(axes_dim) != tuple(own.get("axes_dim", ())):
        extra["axes_dim"] = tuple(axes_dim)
    if float(theta) != float(own.get("base", 10000.0)):
        extra["base"] = float(theta)

    return Finding(
        component,
        audit.where,
        f"axial rotary, axes {tuple(axes_dim)}, base {theta:g}",
        _call("posenc.rope", "ids", sum(axes_dim), preset=audit.preset.name, **extra),
        max(rows, cols) - 1,
        f"ids (0, h, w) for h < {rows}, w < {cols} ({size.words() if size else audit.grid_words})",
        audit.original,
        "none needed on CPU/CUDA; on MPS/NPU: " + PATCH,
        note="computed per call: no bf16 buffer",
        needs_torch=False,
        measure=measure,
    )


def _ids_findings(
    cfg: dict[str, Any], component: str, name: str, size: Size | None = None
) -> list[Finding]:
    audit = VISION.get(name) or VISION["FluxTransformer2DModel"]  # a FLUX config without a name
    own = audit.preset.rotary  # the config's values, else the family's defaults
    kw = audit.keywords(cfg)  # the blocks, and the base where the class takes one
    axes, theta = tuple(kw["axes_dim"]), float(kw.get("base", own["base"]))
    out = [axial(component, axes, theta, audit.grid[0], audit, size)]
    if name in ("FluxTransformer2DModel", ""):  # FLUX.1's own timestep embedding
        where = "time_text_embed.time_proj" + (
            " (and guidance)" if cfg.get("guidance_embeds") else ""
        )
        out.append(timestep(component, where, 256, True, 0, FLOW_T, FLOW_WORDS))
    return out


# --- grids -------------------------------------------------------------------------------------


def vision_findings(cfg: dict[str, Any], component: str, size: Size | None = None) -> list[Finding]:
    """The rotary embedding of a diffusers image or video transformer config (FLUX's and its
    kind's, with FLUX.1's timestep embedding), or [] (CogVideoX without
    ``use_rotary_positional_embeddings`` has none); measured at ``size`` when one is asked."""
    name = str(cfg.get("_class_name", ""))
    family = VISION.get(name)
    if (family is not None and family.ids) or (not name and "axes_dims_rope" in cfg):
        return _ids_findings(cfg, component, name, size)
    if family is None:
        return []
    if name.startswith("CogVideoX") and not cfg.get("use_rotary_positional_embeddings"):
        return []
    return [_finding(family, cfg, component, size)]


def _finding(f: Audit, cfg: dict[str, Any], component: str, size: Size | None = None) -> Finding:
    dim, kw, preset = f.dim(cfg), f.keywords(cfg), f.preset.name
    grid = f.grid if size is None else f.grid_at(size.width, size.height, size.frames)
    if size is not None and f.at_size is not None:  # the pipeline's positions at that size
        kw = {**kw, **f.at_size(cfg, grid[-2], grid[-1])}
    shape = " x ".join(str(n) for n in grid)

    def measure() -> tuple[float | None, float | None, str | None]:
        exact = rope_grid(grid, dim, preset=preset, dtype=np.float64, **kw)
        reached: list[str] = []

        def error(tables: Any) -> float:
            return max(fig._err(t, e) for t, e in zip(tables, exact, strict=True))

        def replayed(compat: str) -> float | None:  # the replay's float32 tables, as NumPy
            try:
                return error(rope_grid(grid, dim, preset=preset, compat=compat, **kw))
            except NotHeld as err:  # other refusals: not measured, and the audit says why
                reached.append(f"the original cannot compute this grid: it holds {err.held}")
                return None

        bf16 = None
        if f.buffers:  # what model.to(torch.bfloat16) leaves in the module's buffers
            rounded = rope_grid(grid, dim, preset=preset, dtype=np.float32, **kw)
            bf16 = error([fig.bf16(r) for r in rounded])
        first = replayed(f.compat)
        figures = [(where, replayed(mode)) for mode, where in f.also]
        others = [f"{where}: {e:.3g}" for where, e in figures if e is not None]
        notes = ["float32 error " + "; ".join(others)] if others else []
        notes += sorted(set(reached))
        if size is not None:
            notes += [n for n in (_beyond(f, grid, dim, kw),) if n]
        return first, bf16, "; ".join(notes) or None

    shown = {k: v for k, v in kw.items() if k != "axes_base"}
    return Finding(
        component,
        f.where,
        f"axial rotary {preset}, d={dim}",
        _call_grid(grid, dim, preset, shown),
        _largest(f, grid, kw, dim) if size is not None else _own_largest(f),
        f"every token of the {shape} grid ({size.words(len(grid)) if size else f.grid_words})",
        f.original,
        FIXES[f.fix],
        note=None if f.buffers else "computed per call: no bf16 buffer",
        measure=measure,
    )


def _own_largest(f: Audit) -> float:
    return max(f.grid) - 1 if f.largest is None else f.largest


def _largest(f: Audit, grid: tuple[int, ...], kw: dict[str, Any], dim: int) -> float:
    """The largest position of the grid measured at a size, as its angles read it: the
    family's coordinates (the call's ``start``, ``step`` or ``crop``, else the preset's own),
    times each axis's factor (Kandinsky's rows and columns at 1 / scale_factor)."""
    k = len(grid)
    if "crop" in kw:
        (top, left), (bottom, right) = kw["crop"]
        starts = [0.0] * (k - 2) + [float(top), float(left)]
        steps = [1.0] * (k - 2) + [(bottom - top) / grid[-2], (right - left) / grid[-1]]
    elif f.preset.positions is not None and "start" not in kw and "step" not in kw:
        starts, steps = f.preset.positions(grid)
    else:
        starts, steps = [0.0] * k, [1.0] * k
        for key, values in (("start", starts), ("step", steps)):
            given = kw.get(key)
            if given is not None:
                values[:] = list(given) if isinstance(given, list | tuple) else [given] * k
    shape = rotary(dim, preset=f.preset.name, **{k: v for k, v in kw.items() if k in ROTARY})
    scales = shape.axes_scale or (1.0,) * k
    ends = [
        max(abs(s0), abs(s0 + st * (n - 1))) * abs(c)
        for s0, st, n, c in zip(starts, steps, grid, scales, strict=True)
    ]
    return float(max(ends))


def _beyond(
    f: Audit, grid: tuple[int, ...], dim: int, kw: dict[str, Any] | None = None
) -> str | None:
    """Past the size the family was trained at: which axes, and the call of the rule that
    extends them as the family's references do (its record's ``extend``; by default RIFLEx on
    a video's frames once they pass its intrinsic pair's period, vision YaRN on the rows and
    columns, DyPE being vision YaRN that follows the diffusion time), with the call's own
    keywords."""
    trained = trained_of(f.preset)
    if trained is None or len(trained.grid) != len(grid):
        return None
    kw = {k: v for k, v in (kw or {}).items() if k != "axes_base"}
    past = [a for a, (n, t) in enumerate(zip(grid, trained.grid, strict=True)) if t and n > t]
    video = trained.repeats_at is not None
    within = ""
    if video and 0 in past:
        period = _intrinsic_period(f, dim, kw, trained.repeats_at or 0)
        if grid[0] <= period:
            past.remove(0)  # RIFLEx acts only past its pair's period
            within = (
                f"the {grid[0]} latent frames stay within the period of its intrinsic pair "
                f"({period} latent frames): no rule on the frames"
            )
    if not past:
        return within or None
    kinds = trained.extend or tuple(
        "riflex" if video and a == 0 else "vision-yarn" for a in range(len(grid))
    )
    rules: list[dict[str, Any] | None] = [None] * len(grid)
    for a in past:
        rule: dict[str, Any] = {"rope_type": kinds[a]}
        length = trained.grid[a] or 1
        entry = RULES[kinds[a]]
        from_grid = () if f.ids else entry.from_grid  # posenc.rope of ids has no grid
        if "factor" in (*entry.required, *entry.optional) and "factor" not in from_grid:
            rule["factor"] = grid[a] / length
        if "original_max_position_embeddings" in entry.from_grid and f.ids:
            rule["original_max_position_embeddings"] = length
        rules[a] = rule
    trained_words = " x ".join("-" if t is None else str(t) for t in trained.grid)
    if f.ids:
        call = _call("posenc.rope", "ids", dim, preset=f.preset.name, scaling=tuple(rules), **kw)
    else:
        call = _call(
            "posenc.rope_grid", grid, dim, preset=f.preset.name, scaling=tuple(rules), **kw
        )
    trained_extent = any(
        "original_max_position_embeddings" in RULES[kinds[a]].from_grid for a in past
    )
    dype = " (or 'dype' with time=t, per step)" if trained_extent else ""
    return "; ".join(
        w for w in (within, f"past the trained {trained_words} on axes {past}: {call}{dype}") if w
    )


def _intrinsic_period(f: Audit, dim: int, kw: dict[str, Any], repeats_at: int) -> int:
    """The period, in latent frames, of the pair RIFLEx lowers on the frames' block (the pair
    nearest where the family's videos repeat)."""
    blocks = rotary(dim, preset=f.preset.name, **{k: v for k, v in kw.items() if k in ROTARY})
    d = (blocks.axes_dim or (dim,))[0]
    base = blocks.bases[0]
    omega = paper(d, base)
    return riflex_period(float(omega[intrinsic_pair(omega, repeats_at) - 1]))


ROTARY = ("base", "axes_dim", "axes_base", "axes_scale", "layout")
"""The audit's keywords that shape the table (the others place it: start, step, crop)."""


def _call_grid(grid: tuple[int, ...], dim: int, preset: str, kw: dict[str, Any]) -> str:
    extra = "".join(f", {k}={v!r}" for k, v in kw.items())
    return f"posenc.rope_grid({grid}, {dim}, preset={preset!r}{extra})"


# --- timm ------------------------------------------------------------------------------------

LEARNED = ("_rope_mixed",)
"""The timm architectures whose rotary frequencies are learned (RoPE-Mixed): no family's."""

TIMM_HEAD = 64
"""The head width measured for timm's rotary models: their ``config.json`` does not hold it
(64 in EVA-02, the ViT-RoPE variants, Perception Encoder core and DINOv3 up to ViT-H+; 128
is assumed for the ``_7b_`` DINOv3)."""


def timm_vision_findings(cfg: dict[str, Any], component: str) -> list[Finding]:
    """A timm rotary vision transformer's table at the size in its ``pretrained_cfg``
    (``compat="timm"`` against exact), or [] for an architecture that is not rotary or whose
    frequencies are learned (the caller says so)."""
    arch = str(cfg["architecture"])
    found = [frag for frag in (*TIMM, *LEARNED) if frag in arch]
    match = re.search(r"patch(\d+)", arch)
    if not found or not match:
        return []
    fragment = max(found, key=len)  # "_rope_mixed" and "_rope_reg" before "_rope_"
    if fragment in LEARNED:
        return []
    audit = TIMM[fragment]
    size = (cfg.get("pretrained_cfg") or {}).get("input_size") or [3, 224, 224]
    grid = (size[-2] // int(match.group(1)), size[-1] // int(match.group(1)))
    kw, largest = audit.positions(arch, grid)
    head = 128 if "_7b_" in arch else TIMM_HEAD
    words = f"{size[-2]} x {size[-1]} pixels, head width {head} assumed"
    family = Audit(
        (),
        audit.preset,
        "rope (timm rotary embedding)",
        grid,
        words,
        "timm's rotary embedding: float32 angles",
        compat="timm",
        keywords=lambda cfg: kw,
        dim=lambda cfg: head,
        buffers=audit.buffers,
        largest=largest,
    )
    return [_finding(family, cfg, component)]
