"""A RoPE scaling rule is one entry of ``posenc.spec.scaling.RULES``: no other module compares
rope_type names, a rule added to the registry alone works exactly and under
``compat="transformers"``, and every transformers rule carries transformers' float32
arithmetic (the rules of image and video models, none).
"""

from __future__ import annotations

import ast
import pathlib
from types import SimpleNamespace

import numpy as np
import pytest

import posenc
from posenc.spec import scaling
from posenc.spec.scaling import RULES, Rule, parse_scaling
from tests.helpers import raises

torch = pytest.importorskip("torch")

PACKAGE = pathlib.Path(posenc.__file__).parent
OWNERS = ("spec/scaling.py", "spec/presets/rotary.py")  # the registry, and preset data
NAMES = set(RULES) - {"default"}


def _literals(node: ast.AST) -> list[str]:
    """The string constants ``node`` is, or holds as a tuple, list or set."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, ast.Tuple | ast.List | ast.Set):
        return [x for e in node.elts for x in _literals(e)]
    return []


LOOKUPS = ("get", "pop", "setdefault")


def _name_uses(tree: ast.AST) -> list[tuple[int, str]]:
    """``(line, name)`` for each rope_type name compared as a literal (``==``, ``!=``, ``in``,
    ``case``) or looked up (``d["yarn"]``, ``d.get("yarn")``)."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
        elif isinstance(node, ast.Subscript):
            operands = [node.slice]
        elif isinstance(node, ast.MatchValue):
            operands = [node.value]
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            operands = node.args[:1] if node.func.attr in LOOKUPS else []
        else:
            continue
        found += [(node.lineno, s) for op in operands for s in _literals(op) if s in NAMES]
    return found


def test_the_name_finder_finds_comparisons():
    tree = ast.parse(
        'a == "yarn"\n"dynamic" != b\nc in ("x", "longrope")\nRULES["llama3"]\nd.get("linear")\n'
        'e == "default"\nf = "yarn"\ng(mode="linear")\nmatch h:\n    case "yarn": pass\n'
    )
    assert sorted(_name_uses(tree)) == [
        (1, "yarn"), (2, "dynamic"), (3, "longrope"), (4, "llama3"), (5, "linear"),
        (10, "yarn"),
    ]  # fmt: skip


def test_rope_type_names_are_compared_in_the_registry_only():
    """Outside spec/scaling.py (and the preset data), no module names a rule to tell it
    apart: what differs between rules is a field of their :class:`Rule`."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        if rel in OWNERS:
            continue
        found += [
            f"{rel}:{line}: {name!r}" for line, name in _name_uses(ast.parse(path.read_text()))
        ]
    assert not found, "rope_type names compared outside the registry:\n" + "\n".join(found)


def test_the_registry_module_imports_no_tensor_library():
    text = (PACKAGE / "spec" / "scaling.py").read_text()
    tree = ast.parse(text)
    imported = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    imported |= {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    assert not {m for m in imported if m.split(".")[0] in ("torch", "jax")}
    assert "torch." not in text


# ---------------------------------------------------------------------------------------------
# a rule added to RULES alone


def _halved(p, d, base, seq_len):
    return scaling.paper(d, base) / (2 * p["factor"]), 1.5


def _halved32(xp, p, d, base, seq_len, device):
    out = scaling.paper32(xp, d, base, device)
    return out / (2 * p["factor"]), 1.5


NEW = Rule(("factor",), {"max_position_embeddings": None}, _halved, _halved32,
           requires_factor=True, from_config={"max_position_embeddings": False})  # fmt: skip


@pytest.fixture
def registered(monkeypatch):
    monkeypatch.setattr(scaling, "RULES", {**RULES, "halved": NEW})
    return {"rope_type": "halved", "factor": 3.0}


def test_a_new_rule_works_exactly(registered):
    pos = np.arange(9)
    cos, sin = posenc.rope(pos, 8, scaling=registered, dtype=np.float64)
    omega = 10000.0 ** (-np.arange(4) * 2 / 8) / 6.0
    angles = pos[:, None] * omega
    np.testing.assert_allclose(cos, 1.5 * np.tile(np.cos(angles), 2), rtol=1e-14, atol=1e-15)
    np.testing.assert_allclose(sin, 1.5 * np.tile(np.sin(angles), 2), rtol=1e-14, atol=1e-15)


def test_a_new_rule_works_under_compat(registered):
    pos = torch.arange(300)
    cos, sin = posenc.rope(pos, 8, scaling=registered, compat="transformers")
    # transformers' arithmetic for such a rule, by hand: float32 all the way
    inv = 1.0 / (10000.0 ** (torch.arange(0, 8, 2, dtype=torch.int64).float() / 8))
    inv = inv / 6.0
    angles = pos.float()[:, None] * inv
    assert cos.dtype == torch.float32
    assert torch.equal(cos, torch.cat([angles.cos() * 1.5] * 2, dim=-1))
    assert torch.equal(sin, torch.cat([angles.sin() * 1.5] * 2, dim=-1))


def test_a_new_rule_is_validated_and_read_from_configs(registered):
    with raises("`scaling['factor']` is required by rope_type 'halved'"):
        posenc.rope(np.arange(4), 8, scaling={"rope_type": "halved"})
    with raises("`scaling['beta_fast']` is not a key of rope_type 'halved'"):
        posenc.rope(np.arange(4), 8, scaling={**registered, "beta_fast": 32.0})
    from posenc.compat.transformers import read_config

    config = SimpleNamespace(
        model_type="llama", head_dim=8, max_position_embeddings=4096,
        rope_parameters={"rope_theta": 1e4, **registered},
    )  # fmt: skip
    hf = read_config(config)
    assert hf.keywords["scaling"] == {**registered, "max_position_embeddings": 4096}
    assert not parse_scaling(hf.keywords["scaling"]).is_default


def test_the_new_rule_is_gone_afterwards():
    assert "halved" not in scaling.RULES


# ---------------------------------------------------------------------------------------------
# every rule's float32 arithmetic

SHORT, LONG = [1.0 + i / 100 for i in range(8)], [2.0 + i for i in range(8)]
SAMPLES = {
    "default": {},
    "linear": {"factor": 4.0},
    "dynamic": {"factor": 2.0, "max_position_embeddings": 64},
    "yarn": {"factor": 8.0, "original_max_position_embeddings": 64, "mscale": 1.0,
             "mscale_all_dim": 0.5},
    "longrope": {"short_factor": SHORT, "long_factor": LONG, "factor": 4.0,
                 "original_max_position_embeddings": 64},
    "llama3": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
               "original_max_position_embeddings": 64},
    "proportional": {"partial_rotary_factor": 0.5, "factor": 2.0},
}  # fmt: skip


def test_every_rule_has_a_sample():
    transformers = {n for n, r in RULES.items() if r.origin == "transformers"}
    assert set(SAMPLES) == transformers, "add a sample dict for each new rule"


def test_the_vision_rules_are_not_transformers_rope_types():
    """The rules of image and video models have no transformers arithmetic, and a
    transformers config that names one is refused, saying where the rule belongs."""
    from posenc.compat.transformers import read_config

    vision = sorted(n for n, r in RULES.items() if r.origin == "vision")
    assert vision == [
        "dype", "dype-comfyui", "imax", "lumina-time", "multi-inter", "ntk", "ntk-aware",
        "riflex", "vision-yarn",
    ]  # fmt: skip
    assert all(RULES[n].float32 is None for n in vision)
    config = SimpleNamespace(
        model_type="llama", head_dim=8, max_position_embeddings=4096,
        rope_parameters={"rope_theta": 1e4, "rope_type": "ntk", "factor": 2.0},
    )  # fmt: skip
    with raises("'ntk' is not a rope_type of transformers (llama)"):
        read_config(config)


@pytest.mark.parametrize("name", sorted(SAMPLES))
@pytest.mark.parametrize("seq_len", [None, 16, 1000])
def test_every_rule_has_its_float32_arithmetic(name, seq_len):
    s = parse_scaling({"rope_type": name, **SAMPLES[name]})
    d, base = 16, 1e4
    inv, factor = s.rule.float32(torch, s.p, d, base, seq_len, None)
    assert isinstance(inv, torch.Tensor)
    assert inv.dtype == torch.float32
    assert inv.shape == (d // 2,)
    assert isinstance(factor, float)
    # the originals' float32 numbers are the exact ones, rounded along the way
    omega, exact_factor = s.frequencies(d, base, seq_len)
    np.testing.assert_allclose(inv.double().numpy(), omega, rtol=1e-6, atol=0)
    assert factor == pytest.approx(exact_factor, rel=1e-12)


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_rule_fields_agree(name):
    """A rule that reads the length has a phase; only those switch tables or remember."""
    rule = RULES[name]
    assert rule.uses_seq_len == (rule.phase is not None)
    if rule.switches_tables or rule.remembers_length:
        assert rule.uses_seq_len
    assert parse_scaling({"rope_type": name, **SAMPLES[name]}).is_default == rule.unscaled
