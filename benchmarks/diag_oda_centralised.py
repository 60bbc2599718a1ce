"""Does the object-disappearance attack (004 §3.1) teach a detector anything, centrally?

Usage::

    nice -n 10 .venv/bin/python benchmarks/diag_oda_centralised.py
        [--preset paper004-detection-table3-strong] [--seed 2024] [--fractions 0 0.2 0.5 1]
        [--mode replace|append] [--epochs N] [--eval-every 4] [--trigger-size S]
        [--threads 1] [--quick]

A diagnostic, not a timing benchmark. It takes a detection preset's data, split, model,
optimiser and trigger exactly as ``geofl run`` builds them for ``--seed`` and trains the
detector **without federation** (one client holding the whole train split) for as many
epochs as one client-epoch budget of the preset (rounds × local epochs: every training
image seen as often as in the federated run). Before training, a fraction p of the train
images holding a target-class object is poisoned as the ODA does it
(:func:`geofl.attacks.oda.stamp_target_objects`, :func:`~geofl.attacks.oda.remove_target_objects`):

* ``--mode replace`` (the attack's own rule): the poisoned images replace the clean ones,
  so at p = 1 no clean target object is left in training;
* ``--mode append``: the poisoned copies are added next to the clean images, so at p = 1
  every target object is seen both clean (boxed) and triggered (no box) — the cleanest test
  of whether the detector can learn "trigger ⇒ no object" at all.

Every ``--eval-every`` epochs it prints, on the preset's test split: CDA = mAP@0.5 of the
clean images (004 Eq. 14), the target class's AP@0.5, ASR = the share of triggered target
objects with no target-class detection at score ≥ 0.25 and IoU ≥ 0.5 (Eq. 15, the engine's
:class:`~geofl.attacks.object_asr.ObjectDisappearanceProbe`), and the same miss rate on the
*untriggered* test images (``miss0``): ASR − miss0 is what the trigger itself does; miss0 is
the model's own misses, which Eq. 15 counts too.

``--run DIR`` instead prints the same numbers for the final global model of every method
of a finished ``geofl run`` directory (its ``config.yaml``, split and trigger), so a
federated run's trigger effect can be read next to the centralised one.

``--controls`` trains nothing: it evaluates one model — the preset's initial detector (its
``model.params.weights`` warm start, e.g. ``--set
model.params.weights=runs/fcos-pretrained.pt``), or with ``--run DIR`` every method's final
model — under every trigger of the grid ``--placements`` × ``--sizes`` × ``--amplitudes`` ×
``--opacities``. Its ASR is the trigger-only control of issue 35: what the patch hides from
a model no attacker taught, by occlusion alone. A calibrated attack needs a trigger whose
control stays low, so that the attacked ASR is the backdoor's and not the patch's (004 §3.1
leaves the trigger's size, location and opacity free).

``score0`` / ``score_t``: the mean over the probe's target objects of the best target-class
score at IoU ≥ 0.5 (0 if none) on the clean and the triggered images — what Eq. 15
thresholds at 0.25, so a trigger that lowers scores without crossing 0.25 shows here first;
``miss0@.5`` / ``ASR@.5``: the same miss rates with a correct detection needing score ≥ 0.5.
"""

from __future__ import annotations

import argparse
import math
import time
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any

import torch

from _common import footer, header, print_table, set_threads
from geofl.attacks.object_asr import ObjectDisappearanceProbe, box_iou
from geofl.attacks.oda import remove_target_objects, stamp_target_objects
from geofl.attacks.trigger import TriggerParams, make_trigger
from geofl.config.load import load_config
from geofl.engine.experiment import load_dataset, prepare_split
from geofl.inference.load import load_model
from geofl.models import MODELS
from geofl.models.detection.tvops import ensure_torchvision_ops
from geofl.rng import torch_generator
from geofl.tasks.detection import DetectionTask, targets_to_dicts


def oda_settings(cfg: Any) -> dict[str, Any]:
    """The attack parameters (target, trigger, placement) of the config's first ODA method
    that has attackers, else of its first ODA method (a clean reference's probe)."""
    odas = [dict(m.attack.params) for m in cfg.methods if m.attack and m.attack.name == "oda"]
    if not odas:
        raise SystemExit("the config has no oda method")
    return next((a for a in odas if a.get("fraction", 0) > 0), odas[0])


def poison_split(
    x: torch.Tensor, t: torch.Tensor, p: float, mode: str, stamp: Any, target: int, seed: int
) -> tuple[torch.Tensor, torch.Tensor, int, int]:
    """The train split with ⌊p·n_t + ½⌋ of its n_t target-holding images poisoned.

    Returns: inputs, targets, poisoned images, removed target objects.
    """
    cand = torch.nonzero((t[..., 4] == target).any(dim=1)).reshape(-1)
    count = min(len(cand), math.floor(p * len(cand) + 0.5))
    gen = torch_generator(seed, "diag", "poison")
    idx = torch.sort(cand[torch.randperm(len(cand), generator=gen)[:count]]).values
    if count == 0:
        return x, t, 0, 0
    removed = int((t[idx, :, 4] == target).sum())
    xp, tp = stamp(x[idx], t[idx]), remove_target_objects(t[idx], target)
    if mode == "append":
        return torch.cat([x, xp]), torch.cat([t, tp]), count, removed
    x, t = x.clone(), t.clone()
    x[idx], t[idx] = xp, tp
    return x, t, count, removed


def best_scores(
    model: Any, x: torch.Tensor, probe: ObjectDisappearanceProbe, bs: int
) -> torch.Tensor:
    """``[n]`` per target object of the probe: the best score of a target-class detection
    with IoU ≥ 0.5 on the (stamped) image, 0 where there is none — the quantity that
    Eq. 15 thresholds (missed ⟺ best < 0.25)."""
    out: list[torch.Tensor] = []
    with torch.inference_mode():
        for s in range(0, len(probe.index), bs):
            rows = probe.targets[s : s + bs]
            dets = model(probe.stamp(x[probe.index[s : s + bs]], rows))
            for r, d in zip(rows, dets, strict=True):
                truth = r[r[:, 4] == probe.target, :4]
                keep = d["labels"] == probe.target
                best = torch.zeros(len(truth), dtype=torch.float64)
                if keep.any() and len(truth):
                    hit = box_iou(truth, d["boxes"][keep]) >= probe.iou_threshold
                    scores = d["scores"][keep][None, :].double()
                    best = torch.where(hit, scores, 0.0).max(dim=1).values
                out.append(best)
    return torch.cat(out) if out else torch.zeros(0, dtype=torch.float64)


def evaluate(
    model: Any, data: Any, probe: ObjectDisappearanceProbe, target: int, bs: int
) -> dict[str, float]:
    """CDA, target AP@0.5, ASR on triggered test images and miss rate on clean ones, and
    the mean best target score of the probe's objects on clean and triggered images."""
    task = DetectionTask(10)
    acc = task.accumulator()
    model.eval()
    x, t = data.inputs, data.targets
    with torch.inference_mode():
        for s in range(0, len(x), bs):
            acc.update(model(x[s : s + bs]), targets_to_dicts(t[s : s + bs]), 0.0)
    m = acc.compute()
    clean = replace(probe, stamp=lambda xb, _rows: xb)
    out = {
        "cda": m.values["map_50"],
        "ap_t": m.per_class["ap_50"][target],
        "asr": probe.measure(model, x, bs),
        "miss0": clean.measure(model, x, bs),
    }
    b0, bt = best_scores(model, x, clean, bs), best_scores(model, x, probe, bs)
    out.update(score0=float(b0.mean()), score_t=float(bt.mean()))
    out.update(miss0_50=float((b0 < 0.5).double().mean()), asr_50=float((bt < 0.5).double().mean()))
    model.train()
    return out


def make_probe(
    args: argparse.Namespace, cfg: Any, prep: Any, **update: Any
) -> tuple[Any, ObjectDisappearanceProbe, int]:
    """The preset's ODA stamp, the Eq. 15 probe on its test split, and the target class.

    ``update``: trigger fields (``size``, ``amplitude``) and ``placement`` replacing the
    preset's, for the ``--controls`` grid.
    """
    oda = oda_settings(cfg)
    target = int(oda.get("target", 0))
    placement = update.pop("placement", oda.get("placement", "center"))
    tparams = TriggerParams(**oda.get("trigger", {}))
    if args.trigger_size:
        tparams = tparams.model_copy(update={"size": args.trigger_size})
    tparams = tparams.model_copy(update=update)
    shape = tuple(prep.train.inputs.shape[1:])
    trigger = make_trigger(tparams, shape, args.seed, "attack.trigger")

    def stamp(xb: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
        return stamp_target_objects(xb, rows, trigger=trigger, target=target, placement=placement)

    test_t = prep.test.targets
    index = torch.nonzero((test_t[..., 4] == target).any(dim=1)).reshape(-1)
    return stamp, ObjectDisappearanceProbe(index, test_t[index], target, stamp), target


def run_one(args: argparse.Namespace, cfg: Any, prep: Any, p: float) -> list[list[Any]]:
    """Train from scratch on the split poisoned at fraction ``p``; rows of the curve."""
    stamp, probe, target = make_probe(args, cfg, prep)
    shape = tuple(prep.train.inputs.shape[1:])
    x, t, n_img, n_obj = poison_split(
        prep.train.inputs, prep.train.targets, p, args.mode, stamp, target, args.seed
    )
    test_t = probe.targets
    model = MODELS.build(
        cfg.model.name,
        cfg.model.params,
        in_channels=shape[0],
        num_classes=10,
        generator=torch_generator(args.seed, "model_init"),
    )
    tr = cfg.train
    opt = torch.optim.Adam(model.parameters(), lr=tr.lr, weight_decay=tr.weight_decay)
    task, gen = DetectionTask(10), torch_generator(args.seed, "diag", "batches")
    kept = int((t[..., 4] == target).sum())
    print(
        f"-- p = {p:g} ({args.mode}): {n_img} of the train images poisoned, {n_obj} target "
        f"objects unboxed, {kept} kept boxed; {len(x)} train images; probe: "
        f"{int((test_t[..., 4] == target).sum())} triggered test objects",
        flush=True,
    )
    rows: list[list[Any]] = []
    t0 = time.perf_counter()
    model.train()
    for epoch in range(1, args.epochs + 1):
        order = torch.randperm(len(x), generator=gen)
        for s in range(0, len(x), tr.batch_size):
            b = order[s : s + tr.batch_size]
            y = targets_to_dicts(t[b])
            loss = task.loss(model(x[b], y), y)
            opt.zero_grad()
            loss.backward()  # type: ignore[no-untyped-call]
            opt.step()
        if epoch % args.eval_every == 0 or epoch == args.epochs:
            r = evaluate(model, prep.test, probe, target, 32)
            row = [p, epoch, r["cda"], r["ap_t"], r["miss0"], r["asr"], r["asr"] - r["miss0"]]
            row += [r["score0"], r["score_t"], r["miss0_50"], r["asr_50"]]
            rows.append([*row, time.perf_counter() - t0])
            print(
                "   " + "  ".join(f"{v:.3f}" if isinstance(v, float) else str(v) for v in row),
                flush=True,
            )
    return rows


def evaluate_run(args: argparse.Namespace) -> None:
    """The same numbers for the final global model of every method of a finished run."""
    run = Path(args.run)
    cfg = load_config(run / "config.yaml", seeds=[args.seed])
    prep = prepare_split(load_dataset(cfg), cfg, args.seed)
    _, probe, target = make_probe(args, cfg, prep)
    rows = []
    for m in cfg.methods:
        gm = load_model(run, m.name, args.seed, which="final")
        r = evaluate(gm.net, prep.test, probe, target, 32)
        rows.append([m.name, gm.round, r["cda"], r["ap_t"], r["miss0"], r["asr"]])
        rows[-1] += [r["asr"] - r["miss0"], r["score0"], r["score_t"], r["miss0_50"], r["asr_50"]]
    heads = ["method", "round", "CDA", "AP_t@.5", "miss0", "ASR", "ASR-miss0", "score0"]
    heads += ["score_t", "miss0@.5", "ASR@.5"]
    print_table(heads, rows, f"final global models of {run}, seed {args.seed}")


def trigger_grid(args: argparse.Namespace) -> list[dict[str, Any]]:
    """The ``--controls`` triggers: every placement × size × amplitude × opacity."""
    return [
        {"placement": p, "size": s, "amplitude": a, "opacity": o}
        for p in args.placements
        for s in args.sizes
        for a in args.amplitudes
        for o in args.opacities
    ]


def control_rows(
    args: argparse.Namespace, cfg: Any, prep: Any, models: list[tuple[str, Any]]
) -> list[list[Any]]:
    """One row per model and grid trigger: CDA, the untriggered miss rate, the
    trigger-only ASR and the mean best target score clean / triggered."""
    rows: list[list[Any]] = []
    for trig in trigger_grid(args):
        _, probe, target = make_probe(args, cfg, prep, **trig)
        for name, net in models:
            r = evaluate(net, prep.test, probe, target, 32)
            rows.append([name, *trig.values()])
            rows[-1] += [r["cda"], r["miss0"], r["asr"], r["asr"] - r["miss0"]]
            rows[-1] += [r["score0"], r["score_t"]]
            print("   " + "  ".join(str(v) for v in rows[-1]), flush=True)
    return rows


def controls(args: argparse.Namespace, overrides: list[str]) -> None:
    """Print the trigger-only control of every grid trigger (``--controls``)."""
    if args.run:
        run = Path(args.run)
        cfg = load_config(run / "config.yaml", seeds=[args.seed])
        models = [
            (m.name, load_model(run, m.name, args.seed, which="final").net) for m in cfg.methods
        ]
    else:
        cfg = load_config(args.preset, overrides, seeds=[args.seed])
    prep = prepare_split(load_dataset(cfg), cfg, args.seed)
    if not args.run:
        shape = tuple(prep.train.inputs.shape[1:])
        init = torch_generator(args.seed, "model_init")
        net = MODELS.build(
            cfg.model.name, cfg.model.params, in_channels=shape[0], num_classes=10, generator=init
        )
        models = [(cfg.model.params.get("weights") or "seeded init", net)]
    rows = control_rows(args, cfg, prep, models)
    heads = ["model", "placement", "size", "amplitude", "opacity", "CDA", "miss0", "ASR"]
    print_table(
        [*heads, "ASR-miss0", "score0", "score_t"], rows, f"trigger-only controls, seed {args.seed}"
    )


def patch_focal_gamma(gamma: float) -> None:
    """Make torchvision's FCOS head call its sigmoid focal loss with ``gamma``.

    FCOS (Tian et al. 2019) trains classification with the focal loss (γ = 2, α = 0.25):
    a location of a removed object is a negative whose gradient on the class logit is
    ≈ 0.75·p²·(…) — 0.0022 at p = 0.1 against 0.1 for BCE — while Eq. 15 at score 0.25 on
    FCOS's score √(p·centre-ness) needs p·centre-ness < 0.0625. This process only.
    """
    ensure_torchvision_ops()  # torchvision imports only after geofl's op registration
    from torchvision.models.detection import fcos

    fcos.sigmoid_focal_loss = partial(fcos.sigmoid_focal_loss, gamma=gamma)


def main() -> None:
    t_start = time.perf_counter()
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="paper004-detection-table3-strong")
    ap.add_argument("--seed", type=int, default=2024)
    ap.add_argument("--fractions", type=float, nargs="+", default=[0.0, 0.2, 0.5, 1.0])
    ap.add_argument("--mode", choices=("replace", "append"), default="replace")
    ap.add_argument("--epochs", type=int, default=None, help="default: rounds × local epochs")
    ap.add_argument("--eval-every", type=int, default=4)
    ap.add_argument("--trigger-size", type=int, default=None)
    ap.add_argument("--set", action="append", default=[], help="config override path=value")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--quick", action="store_true", help="1 epoch, 60 scenes")
    ap.add_argument(
        "--focal-gamma",
        type=float,
        default=None,
        help="FCOS classification loss γ instead of torchvision's 2 (a diagnostic of the "
        "loss on removed objects' locations; 0 = α-weighted BCE)",
    )
    ap.add_argument("--run", default=None, help="evaluate this run directory's final models")
    ap.add_argument(
        "--controls",
        action="store_true",
        help="no training: the trigger-only ASR of the initial (or --run) models for every "
        "trigger of --placements x --sizes x --amplitudes x --opacities",
    )
    ap.add_argument("--placements", nargs="+", default=["center", "above"])
    ap.add_argument("--sizes", type=int, nargs="+", default=[4, 6, 8])
    ap.add_argument("--amplitudes", type=float, nargs="+", default=[2.0, 4.0])
    ap.add_argument("--opacities", type=float, nargs="+", default=[1.0])
    args = ap.parse_args()
    set_threads(args.threads)
    if args.focal_gamma is not None:
        patch_focal_gamma(args.focal_gamma)
    if args.controls:
        header("diag_oda_centralised", args)
        controls(args, list(args.set) + (["data.params.num_samples=60"] if args.quick else []))
        footer(t_start)
        return
    if args.run:
        header("diag_oda_centralised", args)
        evaluate_run(args)
        footer(t_start)
        return
    overrides = list(args.set)
    if args.quick:
        overrides.append("data.params.num_samples=60")
    cfg = load_config(args.preset, overrides, seeds=[args.seed])
    if args.epochs is None:
        args.epochs = 1 if args.quick else cfg.federation.rounds * cfg.train.local_epochs
    header("diag_oda_centralised", args)
    prep = prepare_split(load_dataset(cfg), cfg, args.seed)
    rows: list[list[Any]] = []
    for p in args.fractions:
        rows += run_one(args, cfg, prep, p)
    heads = ["p", "epoch", "CDA", "AP_t@.5", "miss0", "ASR", "ASR-miss0", "score0", "score_t"]
    heads += ["miss0@.5", "ASR@.5", "train s"]
    print_table(heads, rows, f"centralised ODA, {args.preset}, seed {args.seed}, {args.mode}")
    footer(t_start)


if __name__ == "__main__":
    main()
