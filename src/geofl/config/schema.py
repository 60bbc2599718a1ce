"""Typed experiment configuration (pydantic), validated at load time.

An experiment is a set of *methods* (each a choice of partitioner, trainer, release steps,
weighting and aggregator) run over the same data, model and training budget for several
seeds. Plug-ins are named by registry key with their parameters inline::

    partition: {name: dirichlet, alpha: 0.1, min_samples: 10}

Unknown keys, wrong types and impossible values fail at load time with the field path
(``methods.2.partition.alpha: Input should be greater than 0``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    field_validator,
    model_serializer,
    model_validator,
)

from geofl.config.hierarchy import HierarchyConfig
from geofl.config.uplink import UplinkConfig
from geofl.errors import ConfigError
from geofl.registry import printable

__all__ = [
    "DEFAULT_TASK",
    "MAX_COUNT",
    "Component",
    "DataConfig",
    "EarlyStoppingConfig",
    "EvalConfig",
    "ExperimentConfig",
    "FederationConfig",
    "FigureSpec",
    "MethodConfig",
    "ModelConfig",
    "PaperValue",
    "PrivacyConfig",
    "SiteDataConfig",
    "SplitConfig",
    "TargetConfig",
    "TrackingConfig",
    "TrainConfig",
]


#: The task a config without a ``task`` section runs (paper 000's single-label setting).
DEFAULT_TASK = "classification"

#: Upper bound of counts (clients, rounds, samples): far beyond any run, and small enough
#: that arithmetic with floats (``participation * num_clients``) cannot overflow.
MAX_COUNT = 10**9


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class _OmitUnset(_Strict):
    """A section whose optional fields in ``_OPTIONAL`` are left out of the dump while None.

    Fields added after run directories were first written stay out of their resolved
    config (``config.yaml``, governance's committed rule) until a config sets them, so
    those directories resume against today's configs and hash the same.
    """

    _OPTIONAL: ClassVar[tuple[str, ...]] = ()

    @model_serializer(mode="wrap")
    def _omit_unset(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        out: dict[str, Any] = handler(self)
        for key in self._OPTIONAL:
            if out.get(key, 0) is None:
                del out[key]
        return out


class Component(BaseModel):
    """A plug-in named by registry key, with its parameters as extra fields."""

    model_config = ConfigDict(extra="allow", frozen=True)

    name: str = Field(..., min_length=1, description="registry key")

    @property
    def params(self) -> dict[str, Any]:
        """The parameters (every field but ``name``)."""
        return dict(self.model_extra or {})


class SplitConfig(_Strict):
    """Fractions of the whole dataset held out for validation and test (000 §4.1.1)."""

    val: float = Field(0.1, ge=0.0, lt=1.0, description="validation fraction")
    test: float = Field(0.2, gt=0.0, lt=1.0, description="test fraction")
    group: str | None = Field(
        None,
        min_length=1,
        description="metadata key whose groups stay in one split (e.g. 'source' for tiles "
        "of one image); null: stratified by class",
    )

    @model_validator(mode="after")
    def _fractions_leave_train(self) -> SplitConfig:
        if self.val + self.test >= 1.0:
            raise ValueError(
                f"val + test = {self.val + self.test:g} leaves no training data; keep it < 1"
            )
        return self


class SiteDataConfig(_Strict):
    """One site's own data (``data.sites``): a dataset definition only that site loads.

    The site splits it into train/val/test by ``data.split`` with its own generator
    (seed, site name) and trains ``clients`` clients on its train split (partitioned by the
    method's partitioner when more than one). In a deployment the server never sees
    ``dataset``/``params``: they are the site's, may differ between the server's copy of
    the config and the site's (paths), and may be given at the site only (node config
    ``data``); the simulator needs them all.
    """

    name: str = Field(..., pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$", max_length=64)
    dataset: str | None = Field(
        None, description="dataset registry key; absent: named at the site (node config data)"
    )
    params: dict[str, Any] = Field(default_factory=dict, description="dataset parameters")
    clients: int = Field(1, ge=1, le=MAX_COUNT, description="clients this site hosts")


class DataConfig(_OmitUnset):
    """Which dataset, which bands, how it is split and normalised.

    With ``sites`` every site names its own data instead of ``dataset``/``params``
    (:mod:`geofl.engine.sites`): each splits its own data, normalisation uses the per-band
    statistics the sites combine, and evaluation is federated over the sites' splits.
    """

    _OPTIONAL: ClassVar[tuple[str, ...]] = ("sites",)

    dataset: str = Field("synthetic", description="dataset registry key")
    params: dict[str, Any] = Field(default_factory=dict, description="dataset parameters")
    bands: Literal["all", "rgb"] | list[str] = Field("all", description="'all', 'rgb' or names")
    split: SplitConfig = Field(default_factory=SplitConfig)
    normalize: Literal["standardize", "none"] = Field(
        "standardize", description="per-band standardisation with train-split statistics"
    )
    cache_dir: Path | None = Field(None, description="decode cache; default $GEOFL_CACHE")
    cache: Literal["memory", "mmap"] = Field(
        "memory",
        description="memory: decode cache loaded into RAM; mmap: an on-disk array store read "
        "per mini-batch (larger-than-memory data, same metrics)",
    )
    sites: list[SiteDataConfig] | None = Field(
        None,
        min_length=1,
        description="site-local data: each site's own dataset, split at the site; clients "
        "are numbered site by site in this order; absent: one dataset partitioned over "
        "clients",
    )

    @model_validator(mode="after")
    def _sites_replace_dataset(self) -> DataConfig:
        if self.sites is None:
            return self
        names = [s.name for s in self.sites]
        for i, name in enumerate(names):
            if name in names[:i]:
                raise ConfigError(f"sites.{i}.name", f"{name!r} names two sites")
        if self.params:  # (data.dataset keeps its default in dumps; it is ignored)
            raise ConfigError(  # paths below are relative to data (the loader prefixes it)
                "params",
                "with data.sites each site names its own data; move them into "
                "data.sites.<i>.params",
            )
        if self.cache != "memory":
            raise ConfigError("cache", "site-local data (data.sites) needs cache: memory")
        return self


class ModelConfig(_Strict):
    """Model family and its parameters."""

    name: str = Field("small_cnn", description="model registry key")
    params: dict[str, Any] = Field(default_factory=dict)


class TrainConfig(_OmitUnset):
    """Local optimisation (000 §4.1.3: SGD lr 0.01, momentum 0.9, wd 1e-4, batch 64)."""

    _OPTIONAL: ClassVar[tuple[str, ...]] = ("lr_schedule",)

    optimizer: Literal["sgd", "adam"] = "sgd"
    lr: float = Field(0.01, gt=0.0)
    momentum: float = Field(0.9, ge=0.0, lt=1.0)
    weight_decay: float = Field(1e-4, ge=0.0)
    batch_size: int = Field(64, ge=1)
    local_epochs: int = Field(1, ge=1, description="passes over local data per round")
    local_steps: int | None = Field(
        None,
        ge=1,
        description="if set, exactly this many mini-batches per round (overrides epochs)",
    )
    augment: list[Component] = Field(
        default_factory=list,
        description="training-time augmentations in order (001 §6.1.2): band_jitter, "
        "gaussian_noise, band_dropout, illumination_contrast; empty: none",
    )
    lr_schedule: Component | None = Field(
        None,
        description="η_l per round from train.lr (001 §6.1.2: {name: step, every: 30, "
        "factor: 0.5}); constant, step or cosine; absent: train.lr in every round",
    )


class FederationConfig(_OmitUnset):
    """Clients, participation and rounds (000 §4.1.3: K=10, q=1.0)."""

    _OPTIONAL: ClassVar[tuple[str, ...]] = ("workers",)

    num_clients: int = Field(10, ge=1, le=MAX_COUNT)
    participation: float = Field(1.0, gt=0.0, le=1.0, description="fraction q sampled per round")
    rounds: int = Field(20, ge=1, le=MAX_COUNT)
    server_lr: float = Field(1.0, gt=0.0, description="w ← w + η_s · aggregate(Δw)")
    sampling: Component = Field(
        default_factory=lambda: Component(name="fixed"),
        description="client sampler: fixed (q = participation), poisson {rate}, trace {path}",
    )
    client_state: Literal["memory", "mmap"] = Field(
        "memory",
        description="per-client algorithm state in RAM, or memory-mapped under the seed dir",
    )
    workers: int | None = Field(
        None,
        ge=1,
        le=256,
        description="processes running a round's client steps in parallel (results are "
        "bit-identical to 1); absent: 1, in this process",
    )


class EarlyStoppingConfig(_Strict):
    """Stop when a validation metric has not improved for ``patience`` rounds (001 §6.1.2:
    validation loss, 10 rounds)."""

    metric: str = Field("loss", min_length=1, description="validation metric watched")
    patience: int = Field(10, ge=1, le=MAX_COUNT, description="rounds without improvement")
    min_delta: float = Field(0.0, ge=0.0, description="smallest change counted as improvement")


class TargetConfig(_Strict):
    """A target performance whose first round and communication the run reports (001 §6.1.4)."""

    metric: str = Field(..., min_length=1, description="metric name, e.g. accuracy")
    value: float = Field(
        ..., description="reached when the metric is at least (max) / at most (min) this"
    )
    split: Literal["val", "test"] = Field("test", description="split the metric is read on")


class EvalConfig(_OmitUnset):
    """When and how to evaluate, which model is best, when to stop early."""

    _OPTIONAL: ClassVar[tuple[str, ...]] = ("early_stopping", "select_by", "target", "group_by")

    every: int = Field(1, ge=1, description="evaluate val and test every N rounds (and last)")
    batch_size: int = Field(256, ge=1)
    rolling_window: int = Field(10, ge=1, description="rolling std window (000 Fig. 6)")
    observe_updates: bool = Field(
        False,
        description="record what an honest-but-curious server sees of each update "
        "(per-client statistics, observations.jsonl) for the passive attacks",
    )
    select_by: str | None = Field(
        None,
        description="validation metric that picks the best model (001 §6.1.2: macro_f1); "
        "absent: the task's primary metric",
    )
    early_stopping: EarlyStoppingConfig | None = Field(
        None, description="stop after rounds without validation gain; absent: never"
    )
    target: TargetConfig | None = Field(
        None, description="report the first round (and bytes) reaching a metric value"
    )
    group_by: str | None = Field(
        None,
        min_length=1,
        description="per-sample metadata key whose groups get their own metrics and the "
        "primary metric's std and min across groups (003 Table 12: region); absent: none",
    )


class PrivacyConfig(_Strict):
    """How ε is accounted for releases that add calibrated noise."""

    accountant: Component = Field(default_factory=lambda: Component(name="rdp"))
    delta: float = Field(1e-5, gt=0.0, lt=1.0, description="δ of the reported (ε, δ)")
    target_epsilon: float | None = Field(
        None,
        gt=0.0,
        description="a client declines any round that would take its ε(δ) past this "
        "(logged; the run continues with the others); None: no limit",
    )


class MethodConfig(_OmitUnset):
    """One compared method: partition, algorithm, local trainer, release steps, weighting,
    defenses and aggregator (the last three compose inside the algorithm's strategy)."""

    _OPTIONAL: ClassVar[tuple[str, ...]] = ("augment", "uplink", "hierarchy")

    name: str = Field(..., pattern=r"^[A-Za-z0-9][A-Za-z0-9_.+-]*$", max_length=64)
    label: str | None = Field(None, description="display name in reports")
    partition: Component = Field(default_factory=lambda: Component(name="iid"))
    algorithm: Component = Field(
        default_factory=lambda: Component(name="fedavg"),
        description="federated algorithm: fedavg, fedprox, scaffold, feddyn, fednova, ...",
    )
    trainer: Component = Field(default_factory=lambda: Component(name="local_sgd"))
    release: list[Component] = Field(default_factory=list, description="client release steps")
    defenses: list[Component] = Field(default_factory=list, description="server-side filters")
    weighting: Component = Field(default_factory=lambda: Component(name="data_size"))
    aggregator: Component = Field(default_factory=lambda: Component(name="mean"))
    attack: Component | None = Field(None, description="malicious-client behaviour")
    network: Component = Field(default_factory=lambda: Component(name="ideal"))
    augment: list[Component] | None = Field(
        None,
        description="this method's training augmentations, replacing train.augment (e.g. "
        "FL-SPDP's spectral augmentation against baselines without it, 001 Table 4); "
        "None: train.augment",
    )
    uplink: UplinkConfig | None = Field(
        None,
        description="003 ground-layer uplink (pipelines, NQI, envelopes, rural links); "
        "replaces `network`, which must stay `ideal`; None: uploads go through `network`",
    )
    hierarchy: HierarchyConfig | None = Field(
        None,
        description="003 space-assisted hierarchy: tractor → cluster driver → LEO → GEO on "
        "a simulated clock (§2.2, Alg. 3); None: the synchronous flat loop",
    )

    @model_validator(mode="after")
    def _uplink_replaces_network(self) -> MethodConfig:
        if self.uplink is not None and self.network.name != "ideal":
            raise ValueError(
                f"network {self.network.name!r} and uplink are both set; the uplink models "
                "the links itself: drop `network` or set it to ideal"
            )
        return self


class PaperValue(_Strict):
    """A published number to print next to ours in the report.

    The optional columns reproduce the layout of a paper's results table (000 Table 1:
    setting, privacy perturbation, aggregation strategy).
    """

    final_test_accuracy: str
    source: str
    setting: str | None = None
    perturbation: str | None = None
    aggregation: str | None = None


class TrackingConfig(_Strict):
    """Export of a run to experiment trackers (:mod:`geofl.tracking`); observes only.

    Needs the optional extra ``tracking`` (``pip install 'geofl[tracking]'``). Not part of a
    run's resume identity: a run may be resumed with tracking switched on or off.
    """

    mlflow: bool = Field(False, description="log params, per-round metrics and artefacts to MLflow")
    tensorboard: bool = Field(False, description="write TensorBoard event files")
    mlflow_uri: str | None = Field(
        None,
        description="MLflow tracking URI (a server, sqlite:///…); default: a file store in "
        "RUN_DIR/mlruns",
    )
    experiment: str | None = Field(
        None, description="MLflow experiment name; default: the config's name"
    )
    tensorboard_dir: str | None = Field(
        None, description="TensorBoard log directory; default: RUN_DIR/tensorboard"
    )


class FigureSpec(_Strict):
    """A paper figure re-drawn from a subset of the methods."""

    title: str = Field(..., min_length=1)
    methods: list[str] = Field(..., min_length=1)
    kind: Literal["accuracy", "rolling_std"] = "accuracy"


class ExperimentConfig(_Strict):
    """A whole experiment: data, model, training budget, methods and seeds."""

    name: str = Field(..., min_length=1)
    description: str = ""
    seeds: list[int] = Field(default_factory=lambda: [1], min_length=1)
    task: Component = Field(
        default_factory=lambda: Component(name=DEFAULT_TASK),
        description="learning task: classification (default), multilabel, regression, ...",
    )
    data: DataConfig = Field(default_factory=DataConfig)
    model: ModelConfig = Field(default_factory=ModelConfig)
    train: TrainConfig = Field(default_factory=TrainConfig)
    federation: FederationConfig = Field(default_factory=FederationConfig)
    eval: EvalConfig = Field(default_factory=EvalConfig)
    privacy: PrivacyConfig = Field(default_factory=PrivacyConfig)
    governance: dict[str, Any] | None = Field(
        None,
        description="on-chain governance layer (000 §3.5); absent = off. Validated and "
        "completed with defaults by the governance plug-in at load time",
    )
    tracking: TrackingConfig | None = Field(
        None, description="export to MLflow and/or TensorBoard; absent = off"
    )
    methods: list[MethodConfig] = Field(..., min_length=1)
    analyses: list[Component] = Field(
        default_factory=list, description="post-run analyses, e.g. attribute_inference"
    )
    paper: dict[str, PaperValue] = Field(default_factory=dict)
    figures: list[FigureSpec] = Field(default_factory=list, description="paper figures")
    compare_to: str | None = Field(
        None,
        description="method every other one is compared with by paired t-tests over the "
        "seeds both finished (004 Table 3: Δ, d_z, 95 % CI, raw and Holm p); absent: none",
    )

    @model_serializer(mode="wrap")
    def _omit_default_task(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """Leave the default task (plain classification) out of the dump.

        The resolved config (``config.yaml``, governance's committed rule) of every
        classification run stays byte-identical to what it was before tasks existed, so run
        directories written then resume against today's configs and hash the same.
        """
        out: dict[str, Any] = handler(self)
        if self.task.name == DEFAULT_TASK and not self.task.params:
            out.pop("task", None)
        if self.compare_to is None:  # likewise for configs without paired statistics
            out.pop("compare_to", None)
        if self.tracking is None:  # and without tracking
            out.pop("tracking", None)
        return out

    @field_validator("seeds")
    @classmethod
    def _unique_seeds(cls, v: list[int]) -> list[int]:
        if len(set(v)) != len(v):
            raise ValueError(f"seeds must be distinct, got {v}")
        return v

    @model_validator(mode="after")
    def _known_methods(self) -> ExperimentConfig:
        """Method names are unique; ``paper``, ``figures`` and ``compare_to`` name only
        those methods.

        Raises ConfigError with the offending field's path (``methods.3.name``,
        ``paper.<name>``, ``figures.0.methods.1``, ``compare_to``), which
        format_validation_error keeps.
        """
        first: dict[str, int] = {}
        for i, m in enumerate(self.methods):
            if m.name in first:
                raise ConfigError(
                    f"methods.{i}.name",
                    f"{m.name!r} is already the name of methods.{first[m.name]}; "
                    "method names must be unique",
                )
            first[m.name] = i
        choices = ", ".join(first)
        for key in self.paper:
            if key not in first:
                raise ConfigError(
                    f"paper.{printable(key)}", f"no method is named {key!r}; use one of: {choices}"
                )
        if self.compare_to is not None and self.compare_to not in first:
            raise ConfigError(
                "compare_to", f"no method is named {self.compare_to!r}; use one of: {choices}"
            )
        for i, fig in enumerate(self.figures):
            for j, name in enumerate(fig.methods):
                if name not in first:
                    raise ConfigError(
                        f"figures.{i}.methods.{j}",
                        f"no method is named {name!r}; use one of: {choices}",
                    )
        return self
