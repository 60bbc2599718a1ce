"""Gradient inversion by an honest-but-curious server: iDLG and DLG (004 §2.2, Fig. 4).

The server receives one client's released gradient g̃ of a known model and searches for the
input whose gradient matches it (DLG, Zhu et al. 2019):

    x* = argmin_x ‖∇_θ ℓ(f_θ(x), y) − g̃‖²₂

iDLG (Zhao et al. 2020) first reads the label off the gradient: for softmax cross-entropy
on one sample, ∂ℓ/∂b = softmax(z) − onehot(y) of the last layer's bias is negative only at
the true class (without a bias, the rows of ∂ℓ/∂W = (p − onehot(y)) hᵀ with h ≥ 0, e.g.
after a sigmoid, sum to a negative value only at the true class); then only x is optimised.
For batches > 1 (no unique sign), DLG optimises soft dummy labels together with x.

The release is the client's own Gaussian step: clip to C and add N(0, σ² I)
(:func:`geofl.privacy.mechanisms.clip_and_noise`, 000 Eq. 5 and 7); a per-round budget ε
is turned into σ = z · 2C (replace-one sensitivity 2C, 004 Eq. 13) with the noise
multiplier z that makes one release (ε, δ)-DP under the RDP accountant (004 §2.8), or, as
004 Eq. 11 states it, z = √(2 ln(1.25/δ)) / ε (the classic Gaussian mechanism; a guarantee
only for ε < 1, and ≈ 5× less noise than the RDP calibration at ε = 10³).

Why the curve only moves at large ε: σ is per coordinate, so the noise's norm is
σ√D = 2z√D · C against a clipped signal of norm ≤ C. For the D = 13 002 parameters of the
default MLP the noise outweighs the gradient ≥ 145-fold at every ε ≤ 8 (z ≥ 0.64), and iDLG
recovers nothing (≈ 5 dB, the PSNR of a random guess); only z ≲ 1/(2√D) ≈ 0.004 leaves it a
signal, i.e. ε ≳ 3·10⁴ under the RDP accountant or ε ≳ 10³ under Eq. 11.
PSNR and SSIM (scikit-image) score each reconstruction against the original, as in 004
Fig. 4. These are empirical attack results, complementary to, not a substitute for, the
formal accounting (004 §3.5).

Attack models here are built from a seeded generator (no global RNG): a small sigmoid MLP
(twice differentiable, as DLG requires) over ``[B, 3, S, S]`` images.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
from pydantic import BaseModel, ConfigDict, Field
from torch import nn
from torch.nn import functional as F

from geofl.attacks.analyses import ANALYSES, Analysis
from geofl.io import write_json_atomic
from geofl.models.init import init_parameters
from geofl.privacy.mechanisms import clip_and_noise
from geofl.rng import torch_generator

__all__ = [
    "InversionParams",
    "InversionResult",
    "infer_label",
    "inversion_curve",
    "invert_gradients",
    "model_gradients",
    "plot_inversion",
    "reconstruction_quality",
    "release_gradients",
    "run_gradient_inversion",
    "sigma_for_budget",
    "tiny_mlp",
]

Optimizer = Literal["lbfgs", "adam"]
Calibration = Literal["rdp", "classic"]


def tiny_mlp(
    image_size: int, num_classes: int, *, hidden: int, generator: torch.Generator
) -> nn.Module:
    """Flatten → Linear(3·S², hidden) → sigmoid → Linear(hidden, classes), seeded init.

    Built on the meta device (no global-RNG draw), then initialised from ``generator``.
    Input ``[B, 3, S, S]`` → logits ``[B, num_classes]``.
    """
    with torch.device("meta"):
        model = nn.Sequential(
            nn.Flatten(),
            nn.Linear(3 * image_size * image_size, hidden),
            nn.Sigmoid(),
            nn.Linear(hidden, num_classes),
        )
    model = model.to_empty(device="cpu")
    init_parameters(model, generator)
    return model


def model_gradients(
    model: nn.Module, x: torch.Tensor, y: torch.Tensor, *, create_graph: bool = False
) -> list[torch.Tensor]:
    """∇_θ of the mean cross-entropy of ``model`` on ``x`` (``[B, ...]``) and ``y``.

    ``y`` is ``[B]`` int64 class indices or ``[B, classes]`` label probabilities.

    Returns:
        One gradient per parameter, in ``model.parameters()`` order.
    """
    logits = model(x)
    if y.dtype == torch.int64:
        loss = F.cross_entropy(logits, y)
    else:
        loss = -(y * F.log_softmax(logits, dim=-1)).sum(-1).mean()
    return list(torch.autograd.grad(loss, list(model.parameters()), create_graph=create_graph))


def infer_label(last_weight_grad: torch.Tensor, last_bias_grad: torch.Tensor | None) -> int:
    """iDLG's label from the last layer's gradient of a one-sample batch (Zhao et al. 2020).

    Args:
        last_weight_grad: ``[classes, hidden]`` ∂ℓ/∂W (used without a bias: the row sums
            are negative only at the true class when the features are non-negative).
        last_bias_grad: ``[classes]`` ∂ℓ/∂b = p − onehot(y), or None.

    Returns:
        The class index with the negative entry (the smallest, under noise).
    """
    if last_bias_grad is not None:
        return int(torch.argmin(last_bias_grad))
    return int(torch.argmin(last_weight_grad.sum(dim=-1)))


def release_gradients(
    grads: Sequence[torch.Tensor], *, clip: float, sigma: float, generator: torch.Generator
) -> list[torch.Tensor]:
    """The client's Gaussian release of a gradient: clip the flat ``[D]`` vector, add noise.

    Uses :func:`geofl.privacy.mechanisms.clip_and_noise` (000 Eq. 5, 7) on the concatenation
    and splits the result back into the parameters' shapes.
    """
    flat = torch.cat([g.detach().reshape(-1) for g in grads])
    noisy, _ = clip_and_noise(flat, clip=clip, sigma=sigma, generator=generator)
    parts = torch.split(noisy, [g.numel() for g in grads])
    return [part.view_as(g) for part, g in zip(parts, grads, strict=True)]


def sigma_for_budget(
    epsilon: float, delta: float, clip: float, calibration: Calibration = "rdp"
) -> float:
    """σ of one Gaussian release at per-round budget (ε, δ); sensitivity 2C (004 Eq. 13).

    ``rdp``: the noise multiplier z that makes the release (ε, δ)-DP under the RDP
    accountant (004 §2.8), by ``dp_accounting``. ``classic``: 004 Eq. 11's
    z = √(2 ln(1.25/δ)) / ε. Either way σ = z · 2C.
    """
    if epsilon <= 0 or not 0 < delta < 1:
        raise ValueError(f"need ε > 0 and 0 < δ < 1, got ε={epsilon}, δ={delta}")
    classic = math.sqrt(2.0 * math.log(1.25 / delta)) / epsilon
    if calibration == "classic":
        return classic * 2.0 * clip
    import dp_accounting as dpa
    from dp_accounting import mechanism_calibration
    from dp_accounting.rdp import RdpAccountant

    # The RDP z is above the classic one, so a tenth of it brackets z from below; the
    # tolerance follows it so that tiny z (ε ≳ 500) keep their relative precision.
    lower = min(1e-3, classic / 10.0)
    z = mechanism_calibration.calibrate_dp_mechanism(
        RdpAccountant,
        dpa.GaussianDpEvent,
        epsilon,
        delta,
        mechanism_calibration.LowerEndpointAndGuess(lower, 1.0),
        tol=min(1e-4, lower / 10.0),
    )
    return float(z) * 2.0 * clip


def _matching_loss(dummy: Sequence[torch.Tensor], target: Sequence[torch.Tensor]) -> torch.Tensor:
    """DLG's objective Σ ‖∇θ(x') − g̃‖²₂ over all parameters."""
    return torch.stack([((d - t) ** 2).sum() for d, t in zip(dummy, target, strict=True)]).sum()


def invert_gradients(
    model: nn.Module,
    target: Sequence[torch.Tensor],
    shape: tuple[int, ...],
    *,
    label: torch.Tensor | None,
    steps: int,
    generator: torch.Generator,
    optimizer: Optimizer = "lbfgs",
    num_classes: int = 0,
) -> torch.Tensor:
    """Reconstruct the input ``[B, C, H, W]`` whose gradient matches ``target`` (DLG/iDLG).

    Args:
        model: The released gradient's model (its parameters are not changed).
        target: The released gradients, one per parameter.
        shape: ``[B, C, H, W]`` of the dummy input, initialised U(0, 1) from ``generator``.
        label: ``[B]`` int64 known labels (iDLG), or None to optimise soft dummy labels
            ``[B, num_classes]`` too (DLG, Zhu et al. 2019).
        steps: Optimiser iterations (L-BFGS outer steps, or Adam steps).
        generator: Source of the dummy's initialisation.
        optimizer: ``lbfgs`` (DLG's) or ``adam`` (lr 0.05).
        num_classes: Classes of the dummy labels (DLG only).

    Returns:
        ``[B, C, H, W]`` reconstruction clamped to [0, 1].
    """
    dummy = torch.rand(shape, generator=generator).requires_grad_(True)
    variables = [dummy]
    dummy_label: torch.Tensor | None = None
    if label is None:
        if num_classes < 2:
            raise ValueError("DLG without a known label needs num_classes ≥ 2")
        dummy_label = torch.randn((shape[0], num_classes), generator=generator)
        dummy_label.requires_grad_(True)
        variables.append(dummy_label)
    targets = [t.detach() for t in target]

    def closure() -> torch.Tensor:
        opt.zero_grad()
        y = F.softmax(dummy_label, dim=-1) if dummy_label is not None else label
        assert y is not None
        loss = _matching_loss(model_gradients(model, dummy, y, create_graph=True), targets)
        loss.backward()  # type: ignore[no-untyped-call]
        return loss

    opt: torch.optim.Optimizer
    if optimizer == "lbfgs":
        opt = torch.optim.LBFGS(variables, lr=1.0, max_iter=20, line_search_fn="strong_wolfe")
    else:
        opt = torch.optim.Adam(variables, lr=0.05)
    for _ in range(steps):
        opt.step(closure)  # type: ignore[no-untyped-call]
    return dummy.detach().clamp(0.0, 1.0)


def reconstruction_quality(original: torch.Tensor, recon: torch.Tensor) -> tuple[float, float]:
    """PSNR (dB) and SSIM of ``recon`` against ``original`` (``[C, H, W]`` in [0, 1]).

    scikit-image's ``peak_signal_noise_ratio`` and ``structural_similarity`` with data range
    1 (channels last; the SSIM window is the image side when it is below 7, made odd).
    """
    from skimage.metrics import peak_signal_noise_ratio, structural_similarity

    a = original.detach().permute(1, 2, 0).double().numpy()
    b = recon.detach().permute(1, 2, 0).double().numpy()
    psnr = float(peak_signal_noise_ratio(a, b, data_range=1.0))  # type: ignore[no-untyped-call]
    side = min(a.shape[0], a.shape[1])
    win = min(7, side if side % 2 else side - 1)
    ssim = float(
        structural_similarity(  # type: ignore[no-untyped-call]
            a, b, data_range=1.0, channel_axis=-1, win_size=win
        )
    )
    return (psnr if math.isfinite(psnr) else 100.0), ssim


class InversionParams(BaseModel):
    """Parameters of the ``gradient_inversion`` analysis (004 Fig. 4)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    budgets: list[float | None] = Field(
        default_factory=lambda: [None, 8.0, 4.0, 2.0, 1.0, 0.5],
        description="per-round ε of the release; null = the plain, un-noised gradient",
    )
    delta: float = Field(1e-5, gt=0.0, lt=1.0, description="δ of each per-round budget")
    clip: float | None = Field(
        None, gt=0.0, description="L2 bound C; null = the gradient's own norm (no distortion)"
    )
    image: Path | None = Field(None, description="an RGB image file; null = a seeded synthetic")
    image_size: int = Field(8, ge=4, le=32, description="side S of the [3, S, S] image")
    label: int = Field(3, ge=0, description="the image's class")
    num_classes: int = Field(10, ge=2)
    hidden: int = Field(64, ge=4, description="hidden units of the attacked sigmoid MLP")
    steps: int = Field(40, ge=1, description="L-BFGS outer steps (×20 inner iterations)")
    optimizer: Optimizer = "lbfgs"
    calibration: Calibration = Field(
        "rdp", description="ε → σ: rdp (RDP accountant) or classic (004 Eq. 11)"
    )
    seed: int = 0
    repeats: int = Field(
        1, ge=1, le=20, description="attacks per budget, seeds seed … seed + repeats − 1"
    )


@dataclass(frozen=True)
class InversionResult:
    """One budget's attack: the release, the inferred label, the reconstruction's quality.

    Attributes:
        epsilon: Per-round ε (None: plain gradient).
        sigma: Noise standard deviation σ of the release (0 when plain).
        clip: L2 bound C (None when plain).
        noise_to_signal: E‖noise‖₂ / ‖g‖₂ = σ √D / ‖g‖₂.
        label: iDLG's inferred label.
        psnr: PSNR in dB.
        ssim: SSIM.
        recon: ``[3, S, S]`` reconstruction.
    """

    epsilon: float | None
    sigma: float
    clip: float | None
    noise_to_signal: float
    label: int
    psnr: float
    ssim: float
    recon: torch.Tensor

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready fields (without the image)."""
        return {
            "epsilon": self.epsilon,
            "sigma": self.sigma,
            "clip": self.clip,
            "noise_to_signal": self.noise_to_signal,
            "label": self.label,
            "psnr_db": self.psnr,
            "ssim": self.ssim,
        }


def _image(params: InversionParams) -> torch.Tensor:
    """``[3, S, S]`` in [0, 1]: the given file resized, or smooth seeded noise."""
    s = params.image_size
    if params.image is not None:
        from PIL import Image

        with Image.open(params.image) as im:
            rgb = im.convert("RGB").resize((s, s), Image.Resampling.BILINEAR)
            arr = np.asarray(rgb, dtype=np.float32) / 255.0
        return torch.from_numpy(arr).permute(2, 0, 1).contiguous()
    coarse = torch.rand((1, 3, 3, 3), generator=torch_generator(params.seed, "inversion", "image"))
    return F.interpolate(coarse, size=(s, s), mode="bilinear", align_corners=True)[0]


def _attack_one(
    model: nn.Module,
    grads: list[torch.Tensor],
    x: torch.Tensor,
    epsilon: float | None,
    params: InversionParams,
) -> InversionResult:
    """Release ``grads`` at budget ``epsilon``, run iDLG, score the reconstruction."""
    norm = float(torch.cat([g.reshape(-1) for g in grads]).norm())
    sigma, clip, released = 0.0, None, grads
    if epsilon is not None:
        clip = params.clip if params.clip is not None else norm
        sigma = sigma_for_budget(epsilon, params.delta, clip, params.calibration)
        gen = torch_generator(params.seed, "inversion", "release", str(epsilon))
        released = release_gradients(grads, clip=clip, sigma=sigma, generator=gen)
    label = infer_label(released[-2], released[-1])
    dim = sum(g.numel() for g in grads)
    recon = invert_gradients(
        model,
        released,
        tuple(x.shape),
        label=torch.tensor([label]),
        steps=params.steps,
        generator=torch_generator(params.seed, "inversion", "dummy"),
        optimizer=params.optimizer,
    )[0]
    psnr, ssim = reconstruction_quality(x[0], recon)
    nsr = sigma * math.sqrt(dim) / norm if norm > 0 else math.inf
    return InversionResult(epsilon, sigma, clip, nsr, label, psnr, ssim, recon)


def run_gradient_inversion(params: InversionParams) -> tuple[torch.Tensor, list[InversionResult]]:
    """iDLG on one image's gradient at every budget of ``params`` (004 Fig. 4).

    Returns:
        The original ``[3, S, S]`` image and one result per budget.
    """
    if params.label >= params.num_classes:
        raise ValueError(f"label={params.label} must be below num_classes={params.num_classes}")
    model = tiny_mlp(
        params.image_size,
        params.num_classes,
        hidden=params.hidden,
        generator=torch_generator(params.seed, "inversion", "model"),
    )
    image = _image(params)
    x = image.unsqueeze(0)
    grads = [g.detach() for g in model_gradients(model, x, torch.tensor([params.label]))]
    return image, [_attack_one(model, grads, x, eps, params) for eps in params.budgets]


def inversion_curve(
    repeats: Sequence[Sequence[InversionResult]], true_label: int
) -> list[dict[str, Any]]:
    """Mean ± sample sd (ddof 1; 0 for one repeat) of PSNR and SSIM per budget.

    Args:
        repeats: One result list per repeat (image/model/noise seed), budgets aligned.
        true_label: The image's class, to score iDLG's inferred label.

    Returns:
        One ``{epsilon, n, psnr_db_mean, psnr_db_sd, ssim_mean, ssim_sd,
        noise_to_signal_mean, label_correct}`` per budget.
    """
    out = []
    for column in zip(*repeats, strict=True):
        psnr = np.array([r.psnr for r in column])
        ssim = np.array([r.ssim for r in column])
        sd = 1 if len(column) > 1 else 0
        out.append(
            {
                "epsilon": column[0].epsilon,
                "n": len(column),
                "psnr_db_mean": float(psnr.mean()),
                "psnr_db_sd": float(psnr.std(ddof=sd)),
                "ssim_mean": float(ssim.mean()),
                "ssim_sd": float(ssim.std(ddof=sd)),
                "noise_to_signal_mean": float(np.mean([r.noise_to_signal for r in column])),
                "label_correct": sum(r.label == true_label for r in column) / len(column),
            }
        )
    return out


def plot_inversion(image: torch.Tensor, results: Sequence[InversionResult], path: Path) -> None:
    """Original next to each budget's reconstruction, PSNR/SSIM under each (004 Fig. 4)."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(1.9 * (len(results) + 1), 2.5), layout="constrained")
    axes = fig.subplots(1, len(results) + 1, squeeze=False)[0]
    cells = [("original", image)] + [
        (
            f"{'plain' if r.epsilon is None else f'ε = {r.epsilon:g}'}\n"
            f"PSNR {r.psnr:.1f} dB\nSSIM {r.ssim:.2f}",
            r.recon,
        )
        for r in results
    ]
    for ax, (title, img) in zip(axes, cells, strict=True):
        ax.imshow(img.permute(1, 2, 0).clamp(0, 1).numpy(), interpolation="nearest")
        ax.set_title(title, fontsize=9)
        ax.set_axis_off()
    fig.suptitle(
        "iDLG reconstructions per per-round budget (empirical; not a DP guarantee)", fontsize=9
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=150)


class _GradientInversion:
    name = "gradient_inversion"

    def __init__(self, params: InversionParams) -> None:
        self.params = params

    def __call__(self, run_dir: Path) -> dict[str, Any]:
        """Write ``analysis/gradient_inversion.{json,png}`` under ``run_dir``.

        ``budgets`` and the figure are the first repeat's; ``curve`` averages all repeats.
        """
        p = self.params
        seeds = range(p.seed, p.seed + p.repeats)
        runs = [run_gradient_inversion(p.model_copy(update={"seed": s})) for s in seeds]
        image, results = runs[0]
        out = Path(run_dir) / "analysis"
        plot_inversion(image, results, out / "gradient_inversion.png")
        result: dict[str, Any] = {
            "protocol": (
                f"iDLG (Zhao et al. 2020) on one [3, {p.image_size}, {p.image_size}] image's "
                f"gradient of a sigmoid MLP; release = clip + Gaussian noise at per-round (ε, "
                f"δ={p.delta:g}), {p.calibration} calibration; PSNR/SSIM by scikit-image; "
                f"{p.repeats} repeat(s), seeds {p.seed}–{p.seed + p.repeats - 1}"
            ),
            "true_label": p.label,
            "budgets": [r.as_dict() for r in results],
            "curve": inversion_curve([r for _, r in runs], p.label),
        }
        write_json_atomic(out / "gradient_inversion.json", result)
        return result


@ANALYSES.register("gradient_inversion", params=InversionParams)
def build_gradient_inversion(params: InversionParams) -> Analysis:
    """iDLG gradient inversion per per-round privacy budget, PSNR/SSIM and a figure (004 Fig. 4)."""
    return _GradientInversion(params)
