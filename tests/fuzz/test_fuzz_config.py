"""Fuzzing config loading: every malformed config is refused with one line, never a crash.

Shipped presets are mutated by hypothesis (deleted and unknown fields at any depth, leaves
of the wrong type or out of range, unknown plug-in names, client ids that do not exist,
duplicate method names, ``--set`` overrides on random paths) and loaded through
:func:`~geofl.config.load.load_config` from a YAML file. The contract (README, "Bad
input"): either the config loads — then its resolved dump, as a run directory stores it,
loads again to the same config — or a :class:`~geofl.errors.ConfigError` is raised whose
text is one line ``<field path>: <message>``. Any other exception is a crash.

The runs are derandomized (the same examples in CI every time) and need no dataset.
"""

from __future__ import annotations

import math
import signal
import sys
import traceback
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, TypeVar

import pytest
import yaml
from hypothesis import HealthCheck, event, given, note, settings
from hypothesis import strategies as st

from geofl import plugins
from geofl.config.load import load_config, load_raw
from geofl.errors import ConfigError

# Importing the plug-ins raises the recursion limit (py_ecc sets 100 000); do it before
# hypothesis records the limit it restores.
plugins.load_all()

PRESETS = ("demo", "paper000-table1", "paper000-governance-b", "algorithms-heterogeneity")

FUZZ = settings(
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

Path_ = tuple[str | int, ...]
T = TypeVar("T")


def _unshare(node: Any) -> Any:
    """A deep copy with YAML anchors expanded into separate objects (``*noniid`` in the
    presets aliases one dict into several methods; a mutation must hit only one)."""
    if isinstance(node, dict):
        return {k: _unshare(v) for k, v in node.items()}
    if isinstance(node, list):
        return [_unshare(v) for v in node]
    return node


_RAW = {name: load_raw(name) for name in PRESETS}


def preset(name: str) -> dict[str, Any]:
    return _unshare(_RAW[name])  # type: ignore[no-any-return]


def _walk(node: Any, prefix: Path_ = ()) -> Iterator[tuple[Path_, Any]]:
    yield prefix, node
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _walk(v, (*prefix, k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _walk(v, (*prefix, i))


def _get(root: Any, path: Path_) -> Any:
    for key in path:
        root = root[key]
    return root


def _set(root: Any, path: Path_, value: Any) -> Any:
    """Set ``path`` to ``value``; returns the new root (the root itself may be replaced)."""
    if not path:
        return value
    _get(root, path[:-1])[path[-1]] = value
    return root


def _delete(root: Any, path: Path_) -> None:
    parent = _get(root, path[:-1])
    if isinstance(parent, list):
        parent.pop(int(path[-1]))
    else:
        del parent[path[-1]]


# --- values -------------------------------------------------------------------------

#: Text without surrogates (not encodable); line breaks in keys must be escaped in the error.
_KEY_CHARS = st.characters(blacklist_categories=("Cs",))
KEYS = st.one_of(
    st.text(_KEY_CHARS, min_size=1, max_size=12),
    st.sampled_from(["bogus", "params", "name", "alpha", "clients", "nodes", "0", "__class__"]),
)

SPECIAL_NUMBERS = [
    0,
    -1,
    -(10**9),
    2**31,
    2**63,
    10**20,
    10**400,
    0.0,
    -0.0,
    -1.5,
    1e-320,
    1e308,
    -1e308,
    math.nan,
    math.inf,
    -math.inf,
]
SPECIAL_TEXT = [
    "",
    " ",
    "x" * 10_000,
    "名前",
    "\u202eevil",
    "ü" * 300,
    "1e5",
    "1.0e6",
    "yes",
    "null",
    ".inf",
    "NaN",
    "0x10",
    "a\nb",
    "~",
    "{a: 1}",
    "[1, 2]",
]

LEAVES = st.one_of(
    st.booleans(),
    st.none(),
    st.integers(-(10**6), 10**6),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from(SPECIAL_NUMBERS),
    st.text(st.characters(blacklist_categories=("Cs",)), max_size=20),
    st.sampled_from(SPECIAL_TEXT),
)
VALUES = st.recursive(
    LEAVES,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(KEYS, inner, max_size=3),
    max_leaves=6,
)

#: Real registry keys (any role) and junk, for ``name`` fields.
PLUGIN_NAMES = st.one_of(
    st.sampled_from(
        [
            "iid",
            "pooled",
            "dirichlet",
            "mean",
            "krum",
            "median",
            "gaussian",
            "risk_aware",
            "fixed",
            "poisson",
            "rdp",
            "fedavg",
            "scaffold",
            "fednova",
            "consistency",
            "uniform",
            "scripted_outage",
            "scaling",
            "synthetic",
            "small_cnn",
            "resnet18",
            "ucmerced",
            "Mean",
            " mean",
            "mean ",
            "",
        ]
    ),
    st.text(_KEY_CHARS, max_size=15),
)

CLIENT_IDS = st.lists(
    st.one_of(st.integers(-3, 15), st.sampled_from([-(2**63), 2**63, 10**20])), max_size=5
)

#: Fields the schema requires, where they may exist.
REQUIRED = ["name", "methods", "methods.*.name", "paper.*.source", "figures.*.title"]


# --- mutations ----------------------------------------------------------------------


@st.composite
def mutated(draw: st.DrawFn) -> dict[str, Any]:
    """A preset after 1–4 random mutations (each noted for the failure report)."""
    raw: Any = preset(draw(st.sampled_from(PRESETS)))
    for _ in range(draw(st.integers(1, 4))):
        raw = _mutate(draw, raw)
    return raw  # type: ignore[no-any-return]


def _choice(draw: st.DrawFn, seq: Sequence[T]) -> T:
    """A uniform choice: hypothesis's index draws (``sampled_from``) favour the first
    items, e.g. the ``name`` field or the first mutation; a mixed 64-bit draw does not."""
    x = draw(st.integers(0, 2**64 - 1))
    return seq[((x * 0x9E3779B97F4A7C15 + 0x632BE59BD9B4E019) % 2**64) % len(seq)]


def _pick(draw: st.DrawFn, paths: list[Path_]) -> Path_ | None:
    return _choice(draw, paths) if paths else None


def _mutate(draw: st.DrawFn, raw: Any) -> Any:
    if not isinstance(raw, dict):
        return raw
    nodes = list(_walk(raw))
    op = _choice(
        draw,
        [
            "delete",
            "delete_required",
            "unknown_key",
            "replace",
            "plugin_name",
            "client_ids",
            "duplicate_method",
            "wrap",
            "number",
            "number",
        ],
    )
    if op == "delete":
        path = _pick(draw, [p for p, _ in nodes if p])
        if path is not None:
            note(f"delete {path}")
            _delete(raw, path)
    elif op == "delete_required":
        path = _pick(draw, [p for p, _ in nodes if _matches_required(p)])
        if path is not None:
            note(f"delete required {path}")
            _delete(raw, path)
    elif op == "unknown_key":
        path = _pick(draw, [p for p, v in nodes if isinstance(v, dict)])
        if path is not None:
            key, value = draw(KEYS), draw(VALUES)
            note(f"insert {key!r}={value!r} at {path}")
            _get(raw, path)[key] = value
    elif op == "replace":
        path = _pick(draw, [p for p, _ in nodes])
        if path is not None:
            value = draw(VALUES)
            note(f"replace {path} with {value!r}")
            raw = _set(raw, path, value)
    elif op == "plugin_name":
        named = [(*p, "name") for p, v in nodes if p and isinstance(v, dict) and "name" in v]
        named += [p for p in (("data", "dataset"), ("model", "name")) if _has(raw, p)]
        path = _pick(draw, named)
        if path is not None:
            value = draw(PLUGIN_NAMES)
            note(f"plug-in {path} = {value!r}")
            _set(raw, path, value)
    elif op == "client_ids":
        raw = _client_ids(draw, raw)
    elif op == "duplicate_method":
        methods = raw.get("methods")
        if isinstance(methods, list) and methods:
            i = draw(st.integers(0, len(methods) - 1))
            if draw(st.booleans()) or len(methods) == 1:
                note(f"append a copy of methods.{i}")
                methods.append(_unshare(methods[i]))
            else:
                j = draw(st.integers(0, len(methods) - 1))
                if isinstance(methods[i], dict) and isinstance(methods[j], dict):
                    note(f"methods.{j}.name = methods.{i}.name")
                    methods[j]["name"] = methods[i].get("name")
    elif op == "number":  # a numeric leaf out of range, of the wrong kind, or non-finite
        path = _pick(draw, [p for p, v in nodes if _is_number(v)])
        if path is not None:
            old = _get(raw, path)
            value = draw(
                st.sampled_from(SPECIAL_NUMBERS)
                | st.sampled_from([-old, old + 1, old - 1, old * 10**6, str(old), [old], True])
                | st.sampled_from([10**400, -(10**400), 2**64, 1e300])
                | st.floats(allow_nan=True, allow_infinity=True)
            )
            note(f"number {path}: {old!r} -> {value!r}")
            _set(raw, path, value)
    elif op == "wrap":  # a valid subtree moved one level down or into a list
        path = _pick(draw, [p for p, _ in nodes if p])
        if path is not None:
            old = _get(raw, path)
            new = draw(st.sampled_from([[old], {"value": old}, [old, old]]))
            note(f"wrap {path} as {type(new).__name__}")
            _set(raw, path, new)
    return raw


def _is_number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


def _has(raw: Any, path: Path_) -> bool:
    try:
        _get(raw, path)
    except (KeyError, IndexError, TypeError):
        return False
    return True


def _matches_required(path: Path_) -> bool:
    text = ".".join(
        "*" if isinstance(p, int) or (i == 1 and path[0] == "paper") else str(p)
        for i, p in enumerate(path)
    )
    return text in REQUIRED


def _client_ids(draw: st.DrawFn, raw: dict[str, Any]) -> dict[str, Any]:
    """Client ids that may not exist, where the schema takes client ids."""
    ids = draw(CLIENT_IDS)
    methods = (
        [m for m in raw.get("methods", []) if isinstance(m, dict)]
        if isinstance(raw.get("methods"), list)
        else []
    )
    where = draw(st.sampled_from(["nodes", "validators", "attack", "outage"]))
    if where in ("nodes", "validators"):
        gov = raw.setdefault("governance", {})
        if isinstance(gov, dict):
            note(f"governance.{where} = {ids}")
            gov[where] = ids
    elif methods:
        m = draw(st.sampled_from(methods))
        if where == "attack":
            note(f"attack scaling clients {ids} on {m.get('name')!r}")
            m["attack"] = {"name": "scaling", "clients": ids, "factor": -1.0}
        else:
            outages = {c: draw(st.lists(st.integers(-2, 30), max_size=3)) for c in ids}
            note(f"scripted_outage {outages} on {m.get('name')!r}")
            m["network"] = {"name": "scripted_outage", "outages": outages}
    return raw


# --- overrides ----------------------------------------------------------------------

SEGMENTS = st.one_of(
    st.sampled_from(["methods", "federation", "data", "params", "name", "alpha", "0", "-1", "99"]),
    st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=8),
)


@st.composite
def override(draw: st.DrawFn, raw: dict[str, Any]) -> str:
    """``path=value`` for ``--set``: a real path (dotted, by index or name, or bracketed),
    possibly extended or garbled, and a YAML (or junk) value."""
    paths = [p for p, _ in _walk(raw) if p]
    path = list(_pick(draw, paths) or ())
    form = _choice(draw, ["index", "name", "bracket", "garbled", "extend"])
    parts: list[str] = []
    for i, key in enumerate(path):
        if isinstance(key, int) and form in ("name", "bracket"):
            item = _get(raw, tuple(path[: i + 1]))
            name = item.get("name") if isinstance(item, dict) else None
            if isinstance(name, str) and name:
                parts.append(f"[{name}]" if form == "bracket" else name)
                continue
        parts.append(str(key))
    if form == "extend":
        parts += draw(st.lists(SEGMENTS, min_size=1, max_size=3))
    text = ".".join(parts).replace(".[", "[")
    if form == "garbled":
        junk = draw(st.sampled_from(["[", "]", "[]", "..", ".", "=", " ", "[x", "x]"]))
        pos = draw(st.integers(0, len(text)))
        text = text[:pos] + junk + text[pos:]
    old = _get(raw, tuple(path))
    plausible = [old, -old, old * 2, old + 1] if _is_number(old) else [old]
    value = draw(
        st.one_of(
            st.sampled_from(plausible).map(_flow),  # often harmless: the config loads
            VALUES.map(_flow),
            st.text(st.characters(blacklist_categories=("Cs",)), max_size=20),
            st.sampled_from(["", "{", "[1, 2", ": :", "!!python/object:os.system", "*x", "&a 1"]),
        )
    )
    return f"{text}={value}"


def _flow(value: Any) -> str:
    """``value`` as one line of flow-style YAML, as one would type it after ``--set``."""
    text = yaml.safe_dump(value, default_flow_style=True, width=math.inf, allow_unicode=True)
    return text.removesuffix("\n...\n").strip()


# --- the contract -------------------------------------------------------------------


#: Crashes the fuzzing knows (exception type, innermost geofl function) → the bug and its
#: xfail regression below. Add an entry only with a strict xfail that reproduces the bug;
#: remove it when the bug is fixed. (BUG-C2 and BUG-C8 were here; both are fixed.)
KNOWN_CRASHES: dict[tuple[type[BaseException], str, str], str] = {}


def _known_crash(err: BaseException) -> str | None:
    frames = [f for f in traceback.extract_tb(err.__traceback__) if "/geofl/" in f.filename]
    if not frames:
        return None
    return KNOWN_CRASHES.get((type(err), Path(frames[-1].filename).name, frames[-1].name))


def assert_one_line(err: ConfigError) -> None:
    """``<field path>: <message>``, one line, with a path."""
    text = str(err)
    assert err.path, f"ConfigError without a field path: {text!r}"
    assert text == f"{err.path}: {err.message}", text
    assert len(text.splitlines()) == 1 and "\n" not in text, f"not one line: {text!r}"


def load_or_refuse(
    path: Path, overrides: Sequence[str] = (), seeds: list[int] | None = None
) -> str:
    """Load ``path``; refused → its one-line error, loaded → "" after checking that the
    resolved dump (what a run directory stores) loads again to the same config."""
    try:
        cfg = load_config(path, list(overrides), seeds)
    except ConfigError as err:
        assert_one_line(err)
        return str(err)
    except (OverflowError, TypeError) as err:
        known = _known_crash(err)
        if known is None:
            raise
        return f"known: {known}"
    resolved = cfg.model_dump(mode="json")
    again = path.with_name("resolved.yaml")
    again.write_text(yaml.safe_dump(resolved, sort_keys=False, allow_unicode=True))
    assert load_config(again).model_dump(mode="json") == resolved
    return ""


def _write(path: Path, raw: Any) -> Path:
    path.write_text(yaml.safe_dump(raw, sort_keys=False, allow_unicode=True), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("fuzz-config")


@settings(FUZZ)
@given(raw=mutated())
def test_mutated_presets_load_or_fail_with_one_line(work: Path, raw: Any) -> None:
    outcome = load_or_refuse(_write(work / "mutated.yaml", raw))
    note(f"outcome: {outcome or 'loaded'}")
    event(outcome[:70] if outcome else "loaded")


@settings(FUZZ)
@given(data=st.data(), name=st.sampled_from(PRESETS))
def test_set_overrides_load_or_fail_with_one_line(
    work: Path, data: st.DataObject, name: str
) -> None:
    raw = preset(name)
    overrides = data.draw(st.lists(override(raw), min_size=1, max_size=3), label="overrides")
    seeds = data.draw(
        st.none() | st.lists(st.integers(-(2**40), 2**40) | st.sampled_from([0, -1]), max_size=3),
        label="seeds",
    )
    outcome = load_or_refuse(_write(work / "base.yaml", raw), overrides, seeds)
    note(f"outcome: {outcome or 'loaded'}")
    event(outcome[:70] if outcome else "loaded")


# --- regressions of bugs the fuzzing found (BUG-C1 … C8, all fixed) --------------------


def _refused(path: Path, overrides: Sequence[str] = ()) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        load_config(path, list(overrides))
    assert_one_line(info.value)
    return info.value


MINIMAL = "name: x\nmethods: [{name: m}]\n"


@pytest.mark.parametrize(
    ("name", "override", "field"),
    [
        ("demo", "methods.2.name=centralized", "methods.2.name"),
        # paper: names an unknown method
        ("paper000-table1", "methods.0.name=pooled", "paper.centralized"),
        ("algorithms-heterogeneity", "figures.0.methods.0=nope", "figures.0.methods.0"),
    ],
    ids=["duplicate-method", "paper-unknown-method", "figure-unknown-method"],
)
def test_cross_field_errors_name_their_field(
    work: Path, name: str, override: str, field: str
) -> None:
    """BUG-C1: ExperimentConfig's whole-model check (unique method names; ``paper`` and
    ``figures`` naming only known methods) gave no field path and pydantic's "Value error, "
    prefix; the CLI printed 'error: Value error, ...'."""
    err = _refused(_write(work / "c1.yaml", preset(name)), [override])
    assert err.path and not err.message.startswith("Value error")
    assert err.path == field


@pytest.mark.parametrize(
    "override",
    ["data.params.num_samples=" + "9" * 400, "federation.num_clients=" + "9" * 400],
    ids=["num_samples", "num_clients"],
)
def test_huge_integers_are_refused(work: Path, override: str) -> None:
    """BUG-C2: ints beyond float range passed pydantic (no upper bound) and overflowed in
    validate_config's ``n * (1 - val - test)`` and clients_per_round's
    ``participation * num_clients``: OverflowError."""
    err = _refused(_write(work / "c2.yaml", preset("demo")), [override])
    assert err.path == override.partition("=")[0]


@pytest.mark.parametrize(
    "text",
    [
        MINIMAL + "data: {params: &p {a: *p}}\n",
        MINIMAL + "model: {params: {a: &l [*l]}}\n",
        MINIMAL + "model: {params: {a: &t !!pairs [{k: *t}]}}\n",
    ],
    ids=["mapping", "list", "pairs"],
)
def test_self_referencing_alias_is_refused(work: Path, text: str) -> None:
    """BUG-C4: a YAML alias to its own ancestor makes a cyclic structure, and
    reject_loose_values' walk recursed forever: RecursionError."""
    path = work / "c4.yaml"
    path.write_text(text)
    # The interpreter's default limit, as when the CLI reads a config: under the 100 000
    # that importing the governance plug-in (py_ecc) sets, the old walk built ever longer
    # path strings for minutes and > 10 GB before it failed.
    before = sys.getrecursionlimit()
    sys.setrecursionlimit(1000)
    try:
        err = _refused(path)
    finally:
        sys.setrecursionlimit(before)
    assert "contains itself" in err.message


@pytest.mark.parametrize("depth", [40, 300, 3000])
def test_deep_nesting_in_params_is_refused(work: Path, depth: int) -> None:
    """BUG-C5: 300-deep nesting inside a free-form params dict passed validation, then
    validate_config's ``cfg.model_dump(mode='json')`` raised pydantic's plain ValueError
    'Maximum serialization depth exceeded'. (3000 levels overflowed PyYAML's composer.)
    The parser refuses the deepest; what it accepts is refused with the field path."""
    path = work / "c5.yaml"
    path.write_text(MINIMAL + "data: {params: {a: " + "[" * depth + "]" * depth + "}}\n")
    err = _refused(path)
    assert "nested deeper than" in err.message
    if depth == 40:
        assert err.path.startswith("data.params.a.0.0")


def test_deep_nesting_in_a_set_override_is_refused(work: Path) -> None:
    """BUG-C5 through ``--set``: the value is parsed as YAML like the file."""
    value = "[" * 40 + "]" * 40
    err = _refused(_write(work / "c5.yaml", preset("demo")), [f"data.params.a={value}"])
    assert err.path.startswith("data.params.a.0.0") and "nested deeper than" in err.message


def _alarm(signum: int, frame: object) -> None:
    raise TimeoutError("load_config took over 2 s")


def test_alias_bomb_is_refused_quickly(work: Path) -> None:
    """BUG-C6 (a denial of service): YAML aliases nest a few hundred bytes into 10^8 list
    items, and the walk of reject_loose_values took exponential time over every expansion
    before pydantic refused anything."""
    lines = [
        MINIMAL + "model:",
        "  name: small_cnn",
        "  params:",
        "    l0: &l0 [1,1,1,1,1,1,1,1,1,1]",
    ]
    lines += [f"    l{i}: &l{i} [" + ",".join([f"*l{i - 1}"] * 10) + "]" for i in range(1, 8)]
    path = work / "c6.yaml"
    path.write_text("\n".join(lines) + "\n")
    previous = signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, 2.0)
    try:
        _refused(path)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


@pytest.mark.parametrize(
    "text",
    [
        MINIMAL + 'data: {"bad\\nkey": 1}\n',
        MINIMAL + 'data: {params: {"bad\\u2028key": .nan}}\n',
        MINIMAL + 'paper: {"bad\\rkey": {final_test_accuracy: "1", source: s}}\n',
    ],
    ids=["unknown-field", "walk", "paper-key"],
)
def test_line_break_in_a_key_is_escaped(work: Path, text: str) -> None:
    """BUG-C7: a key holding a line break was echoed raw in the field path
    (format_validation_error), so the error spanned two lines."""
    path = work / "c7.yaml"
    path.write_text(text)
    err = _refused(path)
    assert "bad\\" in err.path


@pytest.mark.parametrize(
    "overrides",
    [
        ["methods.0.name=[a]", "methods.fedavg-iid.label=x"],
        ["methods.0.name={a: 1}", "methods[fedavg-dir0.1].partition.alpha=0.3"],
    ],
    ids=["list-name", "dict-name"],
)
def test_override_by_name_with_unhashable_names(work: Path, overrides: list[str]) -> None:
    """BUG-C8: addressing a list item by name hashed every item's name (_list_index), so a
    name that is a list or mapping raised TypeError: unhashable type (found by
    test_set_overrides_load_or_fail_with_one_line)."""
    _refused(_write(work / "c8.yaml", preset("demo")), overrides)


@pytest.mark.parametrize(
    "value",
    ["2024-13-45", "!!int x", "!!bool maybe", "9" * 5000, "!!float x"],
    ids=["bad-date", "bad-int", "bad-bool", "too-many-digits", "bad-float"],
)
def test_yaml_values_the_constructors_cannot_build(work: Path, value: str) -> None:
    """PyYAML's constructors let ValueError / KeyError escape (an impossible date, an
    integer of over 4300 digits); they are refused as invalid YAML, with the position."""
    path = work / "constructor.yaml"
    path.write_text(MINIMAL + f"description: {value}\n")
    err = _refused(path)
    assert "is not valid YAML: line 3, column 14" in err.message
