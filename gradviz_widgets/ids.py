"""The node-id grammar, made and taken apart in one place (no torch).

=========================  =======================================================
``module.path/OpName#k``   an autograd op; k counts that op within that module call
                           order (``OpName#k`` for ops of the root module)
``param:name``             a parameter leaf (``input:name``, ``tensor:k`` likewise)
``acc:<leaf id>``          the AccumulateGrad node of a leaf
``output``                 the loss
``module:path``            a folded module call (``module:path@call`` when the module
                           runs several times, ``module:path@params`` for its parameters)
``group:parent.a-b``       a run of identical sibling modules a..b folded into one node
``ghost:<leaf id>``        a parameter the gradient never reached
=========================  =======================================================

Names are the user's and may hold any character. Op names are class names (no ``/`` or
``#``), so op ids split at their last ``/`` and ``#``; leaf names follow the first ``:``. In
module ids a ``\\`` or ``@`` of the path is escaped with ``\\``, and in group ids the child
names escape ``\\``, ``.`` and ``-`` (the parent ``\\`` only), so every id parses back to what
made it; ordinary names are never escaped. An id alone does not always tell its kind (a root
parameter may be named ``x/Mul#0``): parse an id by the kind its node has.
"""

from __future__ import annotations

#: the pseudo-module the loss computation belongs to
LOSS_SCOPE = "loss"
#: A module call: (module path, call index of that module in this run; -1: its parameters).
Call = tuple[str, int]
#: The calls on the stack when a node was created, outermost first (the root excluded).
Scope = tuple[Call, ...]
#: the scope of the loss computation and of the output node
LOSS_CALL: Scope = ((LOSS_SCOPE, 0),)

OUTPUT = "output"
LEAF_KINDS = ("param", "input", "tensor")
ACC = "acc:"
MODULE = "module:"
GROUP = "group:"
GHOST = "ghost:"
PARAMS_CALL = -1  # the call index standing for "the module's parameters"


def op_id(module: str, op: str, k: int) -> str:
    """Id of the k-th `op` created in `module` ("" is the root).

    Example:
        >>> op_id("layer1.0", "ReluBackward0", 2), op_id("", "AddBackward0", 0)
        ('layer1.0/ReluBackward0#2', 'AddBackward0#0')
    """
    return f"{module}/{op}#{k}" if module else f"{op}#{k}"


def parse_op_id(node_id: str) -> tuple[str, str, int]:
    """(module, op, k) of an op id.

    Example:
        >>> parse_op_id("a/b#c/MulBackward0#3")
        ('a/b#c', 'MulBackward0', 3)
    """
    head, sep, k = node_id.rpartition("#")
    if not sep or not k.isdigit():
        raise ValueError(f"not an op id: {node_id!r}")
    module, _, op = head.rpartition("/")
    return module, op, int(k)


def op_name(node_id: str) -> str:
    """The op part of an id ("MulBackward0#3"); the whole id when it is not an op id.

    Example:
        >>> op_name("fc/AddmmBackward0#1"), op_name("param:fc.weight")
        ('AddmmBackward0#1', 'param:fc.weight')
    """
    try:
        _, op, k = parse_op_id(node_id)
    except ValueError:
        return node_id
    return f"{op}#{k}"


def leaf_id(kind: str, name: str) -> str:
    """Id of a leaf tensor: kind "param", "input" or "tensor".

    Example:
        >>> leaf_id("param", "fc.weight"), leaf_id("input", "0")
        ('param:fc.weight', 'input:0')
    """
    if kind not in LEAF_KINDS:
        raise ValueError(f"leaf kind must be one of {LEAF_KINDS}, got {kind!r}")
    return f"{kind}:{name}"


def param_id(name: str) -> str:
    """Id of parameter `name` ("param:name")."""
    return leaf_id("param", name)


def parse_leaf_id(node_id: str) -> tuple[str, str]:
    """(kind, name) of a leaf id.

    Example:
        >>> parse_leaf_id("param:a:b/c#1")
        ('param', 'a:b/c#1')
    """
    kind, sep, name = node_id.partition(":")
    if not sep or kind not in LEAF_KINDS:
        raise ValueError(f"not a leaf id: {node_id!r}")
    return kind, name


def acc_id(leaf: str) -> str:
    """Id of the AccumulateGrad node of leaf id `leaf` ("acc:param:w")."""
    return ACC + leaf


def acc_leaf(node_id: str) -> str:
    """The leaf id an AccumulateGrad id accumulates into.

    Example:
        >>> acc_leaf("acc:param:fc.weight")
        'param:fc.weight'
    """
    if not node_id.startswith(ACC):
        raise ValueError(f"not an AccumulateGrad id: {node_id!r}")
    return node_id[len(ACC) :]


def ghost_id(leaf: str) -> str:
    """Id of the ghost drawn for leaf id `leaf` ("ghost:param:w")."""
    return GHOST + leaf


def is_ghost(node_id: str) -> bool:
    """True for ids of ghost nodes (never a real node of the run)."""
    return node_id.startswith(GHOST)


def ghost_leaf(node_id: str) -> str:
    """The leaf id a ghost id stands for.

    Example:
        >>> ghost_leaf(ghost_id("param:frozen.weight"))
        'param:frozen.weight'
    """
    if not is_ghost(node_id):
        raise ValueError(f"not a ghost id: {node_id!r}")
    return node_id[len(GHOST) :]


def _escape(text: str, special: str) -> str:
    out = text.replace("\\", "\\\\")
    for c in special:
        out = out.replace(c, "\\" + c)
    return out


def _split_last(text: str, sep: str) -> tuple[str, str] | None:
    """`text` split at its last `sep` not escaped by a backslash (None: there is none)."""
    at, i = -1, 0
    while i < len(text):
        if text[i] == "\\":
            i += 2
            continue
        if text[i] == sep:
            at = i
        i += 1
    return None if at < 0 else (text[:at], text[at + 1 :])


def _unescape(text: str) -> str:
    out, i = [], 0
    while i < len(text):
        if text[i] == "\\" and i + 1 < len(text):
            i += 1
        out.append(text[i])
        i += 1
    return "".join(out)


def module_id(path: str, call: int | None = None) -> str:
    """Id of a folded module: every call (None), one call, or its parameters (PARAMS_CALL).

    Example:
        >>> module_id("h.0"), module_id("cell", 3), module_id("cell", PARAMS_CALL)
        ('module:h.0', 'module:cell@3', 'module:cell@params')
        >>> module_id("at@1")
        'module:at\\\\@1'
    """
    head = MODULE + _escape(path, "@")
    if call is None:
        return head
    return head + ("@params" if call < 0 else f"@{call}")


def is_module_id(node_id: str) -> bool:
    """True for ids made by `module_id`."""
    return node_id.startswith(MODULE)


def parse_module_id(node_id: str) -> tuple[str, int | None]:
    """(path, call) of a module id: call None for every call, PARAMS_CALL for the parameters.

    Example:
        >>> parse_module_id("module:cell@params"), parse_module_id(module_id("at@1", 2))
        (('cell', -1), ('at@1', 2))
    """
    if not is_module_id(node_id):
        raise ValueError(f"not a module id: {node_id!r}")
    rest = node_id[len(MODULE) :]
    split = _split_last(rest, "@")
    if split is None:
        return _unescape(rest), None
    path, call = split
    if call != "params" and not call.isdigit():
        raise ValueError(f"bad call in module id: {node_id!r}")
    return _unescape(path), PARAMS_CALL if call == "params" else int(call)


def group_id(first: str, last: str) -> str:
    """Id of the run of sibling modules `first`..`last` (full paths with one parent).

    Example:
        >>> group_id("h.0", "h.11"), group_id("0", "3")
        ('group:h.0-11', 'group:0-3')
    """
    parent, _, a = first.rpartition(".")
    b = last.rpartition(".")[2]
    head = _escape(parent, "") + "." if parent else ""
    return f"{GROUP}{head}{_escape(a, '.-')}-{_escape(b, '.-')}"


def is_group_id(node_id: str) -> bool:
    """True for ids made by `group_id`."""
    return node_id.startswith(GROUP)


def parse_group_id(node_id: str) -> tuple[str, str, str]:
    """(parent path, first child name, last child name) of a group id.

    Example:
        >>> parse_group_id("group:h.0-11")
        ('h', '0', '11')
    """
    if not is_group_id(node_id):
        raise ValueError(f"not a group id: {node_id!r}")
    rest = node_id[len(GROUP) :]
    run = _split_last(rest, "-")
    if run is None:
        raise ValueError(f"not a group id: {node_id!r}")
    head = _split_last(run[0], ".")
    parent, a = ("", run[0]) if head is None else head
    return _unescape(parent), _unescape(a), _unescape(run[1])


def path_prefixes(path: str) -> list[str]:
    """Every module path from the top down to `path` (module paths are "."-joined names).

    Example:
        >>> path_prefixes("h.0.attn"), path_prefixes("")
        (['h', 'h.0', 'h.0.attn'], [])
    """
    parts = path.split(".") if path else []
    return [".".join(parts[: i + 1]) for i in range(len(parts))]


def owner_path(param: str) -> str:
    """The module path owning a parameter (or buffer) by its qualified name.

    Example:
        >>> owner_path("h.0.attn.c_attn.weight"), owner_path("scale")
        ('h.0.attn.c_attn', '')
    """
    return param.rpartition(".")[0]


def module_of_scope(scope: Scope) -> str:
    """The innermost module path of a call chain ("" for the root).

    Example:
        >>> module_of_scope((("h", 0), ("h.0", 0))), module_of_scope(())
        ('h.0', '')
    """
    return scope[-1][0] if scope else ""


def similar_ids(node_id: str, ids: list[str], limit: int = 5) -> list[str]:
    """Ids that hold the op part of `node_id` (for "did you mean" messages).

    Example:
        >>> similar_ids("x/ReluBackward0#1", ["a/ReluBackward0#1", "b/AddBackward0#0"])
        ['a/ReluBackward0#1']
    """
    key = op_name(node_id).rpartition("/")[2]
    return [i for i in ids if key in i][:limit]
