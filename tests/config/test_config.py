"""Config loading: presets, overrides, and one-line errors naming the field path."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from tests.conftest import tiny_raw

from geofl.config.load import apply_override, list_presets, load_config
from geofl.config.schema import ExperimentConfig
from geofl.errors import ConfigError


def _write(tmp_path: Path, raw: dict[str, object]) -> Path:
    p = tmp_path / "c.yaml"
    p.write_text(yaml.safe_dump(raw))
    return p


def test_shipped_presets_all_validate() -> None:
    names = list_presets()
    assert {"demo", "fedavg-heterogeneity"} <= set(names)
    for name in names:
        cfg = load_config(name)
        assert cfg.name == name and cfg.methods


def test_heterogeneity_preset_matches_paper_settings() -> None:
    cfg = load_config("fedavg-heterogeneity")
    assert cfg.seeds == [1, 42, 2024]
    assert cfg.federation.num_clients == 10 and cfg.federation.participation == 1.0
    t = cfg.train
    assert (t.lr, t.momentum, t.weight_decay, t.batch_size) == (0.01, 0.9, 1e-4, 64)
    alphas = [m.partition.params.get("alpha") for m in cfg.methods]
    assert alphas == [None, None, 0.5, 0.1]


def test_overrides_by_index_by_name_and_seeds(tmp_path: Path) -> None:
    path = _write(tmp_path, tiny_raw())
    cfg = load_config(
        path,
        [
            "federation.rounds=7",
            "methods.1.partition.alpha=0.25",
            "methods.central.label=Pooled",
            "data.params={num_samples: 500, size: 16}",
        ],
        seeds=[1, 2],
    )
    assert cfg.federation.rounds == 7
    assert cfg.methods[1].partition.params["alpha"] == 0.25
    assert cfg.methods[0].label == "Pooled"
    assert cfg.data.params == {"num_samples": 500, "size": 16}
    assert cfg.seeds == [1, 2]


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("federation.roundz=3", r"^federation.roundz: unknown field"),
        ("federation.rounds=many", r"^federation.rounds: expected a number, got str"),
        ("federation.participation=0", r"^federation.participation: Input should be greater"),
        (
            "methods.1.partition.alpha=0",
            r"^methods.1.partition.alpha: Input should be greater than 0",
        ),
        ("methods.1.partition.alpha=-1", r"^methods.1.partition.alpha: Input should be greater"),
        ("methods.1.partition.name=nope", r"^methods.1.partition.name: unknown partitioner 'nope'"),
        ("methods.0.aggregator.name=medoid", r"^methods.0.aggregator.name: unknown aggregator"),
        ("data.params.size=4", r"^data.params.size: Input should be greater than or equal to 16"),
        ("data.dataset=imagenet", r"^data.dataset: unknown dataset 'imagenet'"),
        ("federation.num_clients=5000", r"^federation.num_clients: 5000 clients but only ~280"),
        ("data.split.test=0.95", r"leaves no training data"),
        ("model.params.norm=layer", r"^model.params.norm: Input should be"),
        ("methods.7.name=x", r"^methods.7: index 7 out of range"),
        ("methods.ghost.name=x", r"^methods.ghost: no list item named 'ghost'"),
        ("seeds=[1, 1]", r"seeds must be distinct"),
    ],
)
def test_bad_values_name_the_field(tmp_path: Path, override: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_config(_write(tmp_path, tiny_raw()), [override])


def test_duplicate_method_names_and_unknown_source(tmp_path: Path) -> None:
    raw = tiny_raw()
    raw["methods"] = [{"name": "a"}, {"name": "a"}]
    unique = (
        r"^methods\.1\.name: 'a' is already the name of methods\.0; method names must be unique$"
    )
    with pytest.raises(ConfigError, match=unique):
        load_config(_write(tmp_path, raw))
    with pytest.raises(ConfigError, match="neither a preset"):
        load_config("no-such-preset")


def test_attack_clients_must_exist(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"^methods.1.attack.clients: client ids \[9\]"):
        load_config(
            _write(tmp_path, tiny_raw()),
            ["methods.1.attack={name: scaling, clients: [9], factor: 2}"],
        )


def test_override_syntax_errors() -> None:
    with pytest.raises(ConfigError, match=r"must look like path\.to\.field=value"):
        apply_override({}, "rounds")
    with pytest.raises(ConfigError, match=r"cannot set a field inside a int"):
        apply_override({"a": 1}, "a.b=2")


def test_paper000_presets_match_the_paper_settings() -> None:
    for name in ("paper000-noise", "paper000-aggregation", "paper000-table1"):
        cfg = load_config(name)
        assert cfg.seeds == [1, 42, 2024] and cfg.federation.num_clients == 10
        assert cfg.federation.participation == 1.0
        t = cfg.train
        assert (t.optimizer, t.lr, t.momentum, t.weight_decay, t.batch_size) == (
            "sgd",
            0.01,
            0.9,
            1e-4,
            64,
        )
        for m in cfg.methods:
            if m.partition.name == "dirichlet" and m.name not in ("fedavg-dir0.5",):
                assert m.partition.params["alpha"] == 0.1, (name, m.name)
    table1 = load_config("paper000-table1")
    integrated = next(m for m in table1.methods if m.name == "integrated")
    assert [s.name for s in integrated.release] == ["risk_aware"]
    assert integrated.weighting.name == "consistency" and integrated.weighting.params["beta"] == 5.0
    assert len(table1.methods) == 7 and set(table1.paper) == {m.name for m in table1.methods}


def test_integrated_seeds_preset_repeats_table1_rows() -> None:
    """Its first three seeds are table 1's rows 6–7 exactly (runs are deterministic)."""
    five, table1 = load_config("paper000-integrated-seeds"), load_config("paper000-table1")
    assert five.seeds[:3] == table1.seeds and len(set(five.seeds)) == 5
    for key in ("data", "model", "train", "federation", "privacy"):
        assert getattr(five, key) == getattr(table1, key), key
    rows = {m.name: m for m in table1.methods}
    assert [m.name for m in five.methods] == ["risk-aware-noise", "integrated"]
    for m in five.methods:
        assert m.model_dump(exclude={"label"}) == rows[m.name].model_dump(exclude={"label"})


def test_krum_needs_more_than_2f_plus_2_participants(tmp_path: Path) -> None:
    raw = tiny_raw()
    raw["methods"][1]["aggregator"] = {"name": "krum", "num_byzantine": 1}  # 4 clients ≤ 2·1+2
    with pytest.raises(ConfigError, match=r"methods\.1\.aggregator\.num_byzantine: Krum needs"):
        load_config(_write(tmp_path, raw))
    raw["federation"]["num_clients"] = 5
    assert load_config(_write(tmp_path, raw)).methods[1].aggregator.name == "krum"


def test_unknown_analysis_and_figure_methods_are_named(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"analyses\.0\.name"):
        load_config(_write(tmp_path, tiny_raw(analyses=[{"name": "nope"}])))
    with pytest.raises(ConfigError, match=r"^figures\.0\.methods\.1: no method is named 'x'"):
        load_config(
            _write(tmp_path, tiny_raw(figures=[{"title": "t", "methods": ["fedavg", "x"]}]))
        )
    with pytest.raises(ConfigError, match=r"privacy\.delta"):
        load_config(_write(tmp_path, tiny_raw(privacy={"delta": 0})))


@pytest.mark.parametrize(
    ("over", "field"),
    [
        ({"governance": {"nodes": [1, 9]}}, r"governance\.nodes: clients \[9\] do not exist"),
        ({"governance": {"nodes": [0, 1], "validators": [2]}}, r"governance\.validators"),
        ({"governance": {"nodes": [0]}}, r"governance\.committee\.size: 2 seats"),
        ({"governance": {"methods": ["nope"]}}, r"governance\.methods"),
        ({"analyses": [{"name": "attribute_inference"}]}, r"analyses\.0: .*observe_updates"),
        (
            {
                "analyses": [{"name": "attribute_inference", "window": 9}],
                "eval": {"observe_updates": True},
            },
            r"analyses\.0\.window",
        ),
        (
            {
                "analyses": [{"name": "attribute_inference", "methods": ["x"]}],
                "eval": {"observe_updates": True},
            },
            r"analyses\.0\.methods",
        ),
    ],
)
def test_governance_and_attack_settings_are_checked_at_load(
    tmp_path: Path, over: dict[str, object], field: str
) -> None:
    with pytest.raises(ConfigError, match=field):
        load_config(_write(tmp_path, tiny_raw(**over)))


def test_noise_with_batch_norm_and_too_many_krum_selections_are_refused(tmp_path: Path) -> None:
    raw = tiny_raw(
        model={"name": "small_cnn", "params": {"width": 8, "blocks": 2, "norm": "batch"}}
    )
    raw["methods"][1]["release"] = [{"name": "risk_aware"}]
    with pytest.raises(ConfigError, match=r"methods\.1\.release\.0: noise release steps"):
        load_config(_write(tmp_path, raw))
    raw = tiny_raw(federation={"num_clients": 6, "rounds": 2})
    raw["methods"][1]["aggregator"] = {"name": "krum", "num_byzantine": 1, "num_selected": 6}
    with pytest.raises(ConfigError, match=r"aggregator\.num_selected: Multi-Krum"):
        load_config(_write(tmp_path, raw))


def test_a_method_can_replace_the_experiments_augmentations(tmp_path: Path) -> None:
    def load_config_dict(raw: dict[str, object]) -> ExperimentConfig:
        path = tmp_path / "c.yaml"
        path.write_text(yaml.safe_dump(raw))
        return load_config(path)

    raw = tiny_raw(train={"batch_size": 32, "augment": [{"name": "band_dropout"}]})
    raw["methods"][1]["augment"] = []
    cfg = load_config_dict(raw)
    assert cfg.methods[1].augment == [] and cfg.methods[0].augment is None
    dumped = cfg.model_dump(mode="json")["methods"]
    assert "augment" not in dumped[0] and dumped[1]["augment"] == []
    raw["methods"][1]["augment"] = [{"name": "nope"}]
    with pytest.raises(ConfigError, match=r"methods\.1\.augment\.0"):
        load_config_dict(raw)
