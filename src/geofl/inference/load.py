"""``load_model``: a trained model of a run directory as a ready ``nn.Module``.

The module wraps the network with the preprocessing the run applied to its inputs (band
selection, per-band standardisation with the recorded train statistics), so that
``model(x)`` takes raw, reflectance-scale ``[B, C, H, W]`` images as the dataset holds them
(8-bit RGB divided by 255, Sentinel-2 digital numbers divided by 10000) and returns what
the network returns (class logits for classification). On a split of the run's own data it
reproduces the run's outputs bit for bit.
"""

from __future__ import annotations

import pickle
import zipfile
from pathlib import Path
from typing import Literal

import torch
from torch import nn

from geofl.errors import DataError, GeoflError, RunDirError
from geofl.models.base import FlatModel
from geofl.models.spec import MODEL_SPEC_FILE, ModelSpec, TaskSpec, read_model_spec
from geofl.rundir import seed_dir

__all__ = ["GeoflModel", "Which", "load_model", "resolve_seed_dir"]

#: Which weights of a seed: the best-validation model or the one after the last round.
Which = Literal["best", "final"]

_WEIGHTS = {"best": "best.pt", "final": "checkpoint.pt"}


class GeoflModel(nn.Module):
    """A trained geofl network with its input preprocessing; always built in eval mode.

    Args:
        net: The network, weights loaded.
        spec: The seed's ``model.json``.
        round_idx: The round whose global model the weights are.
        which: ``"best"`` or ``"final"``.

    Attributes:
        net: The network (expects preprocessed inputs).
        spec: The seed's :class:`~geofl.models.spec.ModelSpec`.
        round: The round whose global model this is.
        which: ``"best"`` (best validation round) or ``"final"`` (last completed round).
    """

    band_index: torch.Tensor | None
    mean: torch.Tensor | None
    std: torch.Tensor | None

    def __init__(self, net: nn.Module, spec: ModelSpec, round_idx: int, which: str) -> None:
        super().__init__()
        self.net = net
        self.spec = spec
        self.round = round_idx
        self.which = which
        index = spec.input.band_index
        identity = index == tuple(range(len(spec.input.dataset_bands)))
        self.register_buffer("band_index", None if identity else torch.tensor(index))
        norm = spec.normalization
        for name in ("mean", "std"):
            values = getattr(norm, name) if norm.kind == "standardize" else None
            stat = None if values is None else torch.tensor(values, dtype=torch.float32)
            self.register_buffer(name, stat)  # [C], broadcast over the channel axis
        self.eval()

    @property
    def classes(self) -> tuple[str, ...]:
        """Class names, index-aligned with the output channels."""
        return self.spec.classes

    @property
    def task(self) -> TaskSpec:
        """The task the model was trained for (name, parameters, fitted statistics)."""
        return self.spec.task

    @property
    def bands(self) -> tuple[str, ...]:
        """The bands the network sees, in channel order."""
        return self.spec.input.bands

    @property
    def input_bands(self) -> tuple[str, ...]:
        """The dataset's bands in file order (what a full raw input holds)."""
        return self.spec.input.dataset_bands

    @property
    def patch_size(self) -> tuple[int, int] | None:
        """Height and width of the training patches (None for tabular inputs)."""
        return self.spec.input.patch_size

    def preprocess(self, x: torch.Tensor) -> torch.Tensor:
        """Select the trained bands and standardise, as the run did.

        Args:
            x: ``[B, C, H, W]`` raw images (``[B, F]`` features for tabular models) with
                ``C`` = the dataset's band count (the trained bands are selected), or ``C`` =
                the trained band count (taken as already selected, in :attr:`bands` order).

        Raises:
            DataError: another shape or band count.
        """
        want = 2 if self.patch_size is None else 4
        if x.ndim != want:
            form = "[B, F]" if want == 2 else "[B, C, H, W]"
            raise DataError(f"inputs must be {form}, got shape {tuple(x.shape)}")
        c = x.shape[1]
        if c == len(self.input_bands):
            if self.band_index is not None:
                x = x[:, self.band_index]
        elif c != len(self.bands):
            raise DataError(
                f"inputs have {c} bands; the model takes {len(self.input_bands)} "
                f"({', '.join(self.input_bands)}) or {len(self.bands)} ({', '.join(self.bands)})"
            )
        x = x.to(torch.float32)
        if self.mean is not None and self.std is not None:
            shape = (1, -1) + (1,) * (x.ndim - 2)
            x = (x - self.mean.view(shape)) / self.std.view(shape)
        return x

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """The network's outputs (class logits for classification) for raw inputs ``x``."""
        out: torch.Tensor = self.net(self.preprocess(x))
        return out


def _choose(kind: str, found: list[str], wanted: str | None, where: str, flag: str) -> str:
    """The one of ``found`` that ``wanted`` names, or the only one (``kind``: "method")."""
    if wanted is not None:
        if wanted in found:
            return wanted
        raise RunDirError(
            f"{where} has no {kind} {wanted!r}; choose {flag} from: {', '.join(found)}"
        )
    if len(found) == 1:
        return found[0]
    raise RunDirError(
        f"{where} holds {len(found)} {kind}s ({', '.join(found)}); choose one with {flag}"
    )


def resolve_seed_dir(run_dir: Path, method: str | None = None, seed: int | None = None) -> Path:
    """The seed directory of ``(method, seed)`` in ``run_dir``; a lone one needs no naming.

    Raises:
        RunDirError: no such run directory, method or seed; or several and none chosen
            (the message lists the choices).
    """
    run_dir = Path(run_dir)
    root = run_dir / "methods"
    if not root.is_dir():
        raise RunDirError(
            f"{run_dir} is not a geofl run directory (no methods/ folder); pass the --out "
            "folder of a `geofl run`"
        )
    methods = sorted(p.name for p in root.iterdir() if p.is_dir() and any(p.glob("seed-*")))
    if not methods:
        raise RunDirError(f"{run_dir} holds no trained seed yet; run or resume it first")
    name = _choose("method", methods, method, str(run_dir), "--method")
    seeds = sorted(
        int(p.name[5:]) for p in (root / name).glob("seed-*") if p.name[5:].lstrip("-").isdigit()
    )
    wanted = None if seed is None else str(seed)
    chosen = _choose("seed", [str(s) for s in seeds], wanted, str(root / name), "--seed")
    return seed_dir(run_dir, name, int(chosen))


def _load_flat(path: Path, which: str) -> tuple[torch.Tensor, int]:
    """``(flat parameters, round)`` from ``best.pt`` or ``checkpoint.pt``."""
    if not path.exists():
        hint = "it is written after the first evaluated round; resume the run"
        raise RunDirError(f"{path} does not exist ({which} model); {hint}")
    try:  # checkpoint.pt holds the strategy's and clients' state: not weights-only
        obj = torch.load(path, weights_only=which == "best", map_location="cpu")
    except (
        OSError,
        EOFError,
        RuntimeError,
        ValueError,
        pickle.UnpicklingError,
        zipfile.BadZipFile,
    ) as err:
        raise RunDirError(f"{path} is damaged ({type(err).__name__}); rerun that seed") from None
    params = obj.get("params") if isinstance(obj, dict) else None
    if not isinstance(params, torch.Tensor) or params.ndim != 1 or "round" not in obj:
        raise RunDirError(f"{path} holds no geofl model (params, round); rerun that seed")
    return params.to(torch.float32), int(obj["round"])


def _build_net(spec: ModelSpec, spec_path: Path) -> nn.Module:
    from geofl import plugins  # the model registry, with models of other packages

    plugins.load_all()
    # The trained parameters come from the run's model file: initial ``weights`` files the
    # run started from are neither needed nor read (they may have moved since).
    params = {k: v for k, v in spec.model.params.items() if k != "weights"}
    try:
        return plugins.MODELS.build(
            spec.model.name,
            params,
            in_channels=spec.model.in_channels,
            num_classes=spec.model.num_outputs,
            generator=torch.Generator().manual_seed(0),  # overwritten by the weights
        )
    except GeoflError as err:
        raise RunDirError(
            f"{spec_path}: model {spec.model.name!r} cannot be built here ({err}); install "
            "the package that provides it"
        ) from None


def load_model(
    run_dir: Path | str,
    method: str | None = None,
    seed: int | None = None,
    which: Which = "best",
) -> GeoflModel:
    """A trained model of a run, with its preprocessing, in eval mode.

    Args:
        run_dir: A run directory written by ``geofl run``.
        method: The method; may be omitted when the run has one.
        seed: The seed; may be omitted when the method has one.
        which: ``"best"`` (the best-validation model, ``best.pt``, read weights-only) or
            ``"final"`` (the model after the last completed round, from ``checkpoint.pt``,
            which is a full pickle: use ``"final"`` only on run directories you trust).

    Returns:
        A :class:`GeoflModel`: ``model(raw)`` gives the network's outputs for raw
        ``[B, C, H, W]`` inputs; ``model.classes``, ``model.task``, ``model.bands``,
        ``model.patch_size`` describe it.

    Raises:
        RunDirError: one line naming what is missing or damaged: no such method or seed
            (listing the choices), a run written before ``model.json`` existed, a missing
            or damaged weights file, a model this installation cannot build.
    """
    if which not in _WEIGHTS:
        raise RunDirError(f"which must be 'best' or 'final', got {which!r}")
    sdir = resolve_seed_dir(Path(run_dir), method, seed)
    spec_path = sdir / MODEL_SPEC_FILE
    if not spec_path.exists():
        raise RunDirError(
            f"{sdir} has no {MODEL_SPEC_FILE}: the run was written before geofl recorded "
            "what inference needs; rerun the experiment with this geofl "
            f"(geofl run {Path(run_dir) / 'config.yaml'} --out NEW_DIR) to use its models"
        )
    spec = read_model_spec(spec_path)
    flat, round_idx = _load_flat(sdir / _WEIGHTS[which], which)
    net = _build_net(spec, spec_path)
    workspace = FlatModel(net)
    if workspace.spec.numel != flat.numel():
        raise RunDirError(
            f"{sdir / _WEIGHTS[which]} holds {flat.numel()} parameters but {spec_path}'s model "
            f"has {workspace.spec.numel}; the files do not belong together: rerun that seed"
        )
    workspace.load(flat)
    return GeoflModel(net, spec, round_idx, which)
