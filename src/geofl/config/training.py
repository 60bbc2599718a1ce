"""The sections of the training budget: ``model``, local optimisation (``train``), the
federation (clients, participation, rounds) and privacy accounting (``privacy``)."""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import Field, field_validator, model_validator

from geofl.config.base import MAX_COUNT, Component, _OmitUnset, _Strict

__all__ = [
    "FederationConfig",
    "ModelConfig",
    "PrivacyConfig",
    "SecureAggregationConfig",
    "TrainConfig",
]


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

    _OPTIONAL: ClassVar[tuple[str, ...]] = ("workers", "batch_clients")

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
        description="processes running a round's client steps in parallel; absent: 1, in "
        "this process. Bit-identical to 1 when each worker's intra-op thread count equals "
        "the parent's (e.g. OMP_NUM_THREADS=1); otherwise equal to float32 rounding, as "
        "conv kernels split reductions by thread count",
    )
    batch_clients: Literal["auto", "off"] | None = Field(
        None,
        description="auto: clients of one architecture and local program train as one "
        "batched computation (geofl.client.batched; models equal the sequential step's to "
        "float32 rounding, not to the bit), the sequential step where the program cannot "
        "batch; off (absent): one client after another, bit for bit as before",
    )

    @field_validator("batch_clients", mode="before")
    @classmethod
    def _bare_off(cls, value: object) -> object:
        """YAML 1.1 reads a bare ``off`` as false (in a file and in ``--set``): the word
        the user wrote."""
        return "off" if value is False else value

    @model_validator(mode="after")
    def _batch_in_process(self) -> FederationConfig:
        if self.batch_clients == "auto" and (self.workers or 1) > 1:
            raise ValueError(
                f"batch_clients: auto trains the cohort in this process, but workers is "
                f"{self.workers}; set workers to 1 or batch_clients: off"
            )
        return self


class SecureAggregationConfig(_Strict):
    """SecAgg+'s fixed-point encoding (Bell et al. 2020; Flower's ``SecAggPlusWorkflow``).

    A site sends x = (W/W_max)·v, v its clients' weighted mean update and W their summed
    weight, each coordinate clipped to [-c, c] and stochastically rounded to one of
    ``quantization_range`` levels; masks are drawn mod ``modulus_range``. The server
    divides the unmasked sum by ΣW/W_max: each site adds at most one level, 2c/Q, so a
    coordinate of the mean is off by at most S·(2c/Q)·W_max/ΣW for S sites (unbiased), and
    a coordinate with |x| > c is clipped (biased: keep updates inside ±c).
    """

    clipping_range: float = Field(
        8.0, gt=0.0, allow_inf_nan=False, description="c: coordinates clipped to [-c, c]"
    )
    quantization_range: int = Field(
        2**22, ge=2, le=2**30, description="Q: levels of the fixed-point encoding"
    )
    modulus_range: int = Field(
        2**32, ge=4, le=2**32, description="masks are drawn mod this power of two (> Q)"
    )
    max_weight: float = Field(
        1000.0,
        gt=0.0,
        allow_inf_nan=False,
        description="W_max: the largest weight a site sends in a round (the summed "
        "data_size weights, n_k, of its trained clients; 1 per client with uniform)",
    )

    @field_validator("modulus_range")
    @classmethod
    def _power_of_two(cls, value: int) -> int:
        if value & (value - 1):
            raise ValueError(f"{value} is not a power of two (SecAgg+ masks mod 2^b)")
        return value

    @model_validator(mode="after")
    def _room_for_the_sum(self) -> SecureAggregationConfig:
        if self.modulus_range <= self.quantization_range:
            raise ValueError(
                f"modulus_range {self.modulus_range} must exceed quantization_range "
                f"{self.quantization_range}: the sites' encoded values are summed mod it"
            )
        return self


class PrivacyConfig(_OmitUnset):
    """How ε is accounted for releases that add calibrated noise, and where the noise and
    the sampling come from (``randomness``, :mod:`geofl.rng`)."""

    _OPTIONAL: ClassVar[tuple[str, ...]] = ("randomness", "secure_aggregation")

    accountant: Component = Field(default_factory=lambda: Component(name="rdp"))
    delta: float = Field(1e-5, gt=0.0, lt=1.0, description="δ of the reported (ε, δ)")
    target_epsilon: float | None = Field(
        None,
        gt=0.0,
        description="a client declines any round that would take its ε(δ) past this "
        "(logged; the run continues with the others); None: no limit",
    )
    randomness: Literal["seeded", "secure"] | None = Field(
        None,
        description="seeded: noise and sampling derived from (seed, round, client) — "
        "reproducible, and regenerable by anyone who knows the config (the server); secure: "
        "from a secret each party draws from the OS CSPRNG and keeps. Absent: seeded in "
        "simulation, secure in geofl deploy",
    )
    secure_aggregation: SecureAggregationConfig | None = Field(
        None,
        description="geofl deploy: sites send their updates through Flower's SecAgg+, so "
        "the server learns only the round's weighted sum (true: Flower's defaults); refused "
        "for server sides that inspect individual updates. The simulator computes the same "
        "sum exactly. Absent: plain uploads",
    )

    @field_validator("secure_aggregation", mode="before")
    @classmethod
    def _switch(cls, value: Any) -> Any:
        """``true`` switches it on with the defaults, ``false`` off."""
        if value is True:
            return {}
        return None if value is False else value
