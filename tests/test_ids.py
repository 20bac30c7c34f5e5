"""The id grammar (ids.py): every id made from any name parses back to that name."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gradviz_widgets import ids

HOSTILE = [
    "plain",
    "a/b",
    "x#3",
    "a:b",
    "at@1",
    "at@params",
    "trail@",
    "back\\slash",
    "\\",
    "@",
    "-",
    "a-b",
    "dot.ted",
    "new\nline",
    "中文",
    "#",
    "/",
    "",
    "\\@",
    "module:x",
    "param:y",
    "group:z",
    "-->",
]
names = st.text(st.characters(codec="utf-8"), max_size=12)  # any name, surrogates aside
ops = st.sampled_from(["AddBackward0", "MulBackward0", "AccumulateGrad", "X"])
calls = st.one_of(st.none(), st.integers(0, 10_000), st.just(ids.PARAMS_CALL))


@pytest.mark.parametrize("module", HOSTILE)
@pytest.mark.parametrize("k", [0, 7, 123])
def test_op_ids_round_trip(module: str, k: int) -> None:
    assert ids.parse_op_id(ids.op_id(module, "MulBackward0", k)) == (module, "MulBackward0", k)


@given(names, ops, st.integers(0, 10**6))
def test_op_ids_round_trip_any_name(module: str, op: str, k: int) -> None:
    assert ids.parse_op_id(ids.op_id(module, op, k)) == (module, op, k)


@given(st.sampled_from(ids.LEAF_KINDS), names)
def test_leaf_acc_and_ghost_ids_round_trip(kind: str, name: str) -> None:
    leaf = ids.leaf_id(kind, name)
    assert ids.parse_leaf_id(leaf) == (kind, name)
    assert ids.acc_leaf(ids.acc_id(leaf)) == leaf
    assert ids.ghost_leaf(ids.ghost_id(leaf)) == leaf and ids.is_ghost(ids.ghost_id(leaf))


@pytest.mark.parametrize("path", HOSTILE)
@pytest.mark.parametrize("call", [None, 0, 3, ids.PARAMS_CALL])
def test_module_ids_round_trip(path: str, call: int | None) -> None:
    made = ids.module_id(path, call)
    assert ids.is_module_id(made) and ids.parse_module_id(made) == (path, call)


@given(names, calls)
def test_module_ids_round_trip_any_name(path: str, call: int | None) -> None:
    assert ids.parse_module_id(ids.module_id(path, call)) == (path, call)


def test_ordinary_ids_are_unchanged() -> None:
    assert ids.module_id("layer1.0") == "module:layer1.0"
    assert ids.module_id("cell", 2) == "module:cell@2"
    assert ids.module_id("cell", ids.PARAMS_CALL) == "module:cell@params"
    assert ids.group_id("transformer.h.0", "transformer.h.11") == "group:transformer.h.0-11"
    assert ids.op_id("", "AddBackward0", 0) == "AddBackward0#0"
    assert ids.acc_id(ids.param_id("fc.weight")) == "acc:param:fc.weight"
    assert ids.ghost_id(ids.param_id("w")) == "ghost:param:w"


child = names.filter(lambda s: s != "")


@given(st.lists(child, max_size=3), child, child)
def test_group_ids_round_trip(parents: list[str], a: str, b: str) -> None:
    parent = ".".join(parents)
    first = f"{parent}.{a}" if parent else a
    last = f"{parent}.{b}" if parent else b
    if "." in a or "." in b:  # names with "." (forced into _modules) cannot be told from paths
        return
    assert ids.parse_group_id(ids.group_id(first, last)) == (parent, a, b)


@pytest.mark.parametrize("name", [n for n in HOSTILE if n and "." not in n])
def test_group_ids_round_trip_hostile(name: str) -> None:
    made = ids.group_id(f"h.{name}", f"h.{name}-2")
    assert ids.is_group_id(made) and ids.parse_group_id(made) == ("h", name, f"{name}-2")


@pytest.mark.parametrize(
    ("parse", "bad"),
    [
        (ids.parse_op_id, "param:w"),
        (ids.parse_op_id, "x#y"),
        (ids.parse_leaf_id, "output"),
        (ids.acc_leaf, "param:w"),
        (ids.ghost_leaf, "param:w"),
        (ids.parse_module_id, "group:a-b"),
        (ids.parse_module_id, "module:a@x"),
        (ids.parse_group_id, "group:ab"),
    ],
)
def test_wrong_kinds_are_refused(parse, bad: str) -> None:
    with pytest.raises(ValueError):
        parse(bad)


def test_paths() -> None:
    assert ids.path_prefixes("a.b.c") == ["a", "a.b", "a.b.c"]
    assert ids.owner_path("a.b.weight") == "a.b" and ids.owner_path("w") == ""
    assert ids.module_of_scope((("a", 0), ("a.b", 1))) == "a.b"
    assert ids.op_name("a/b/MulBackward0#2") == "MulBackward0#2"
