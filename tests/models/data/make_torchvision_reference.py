"""Write ``torchvision_resnet18.json``: torchvision's ResNet-18 layout and reference logits.

Usage::

    python tests/models/data/make_torchvision_reference.py PATH/TO/torchvision/models/resnet.py

The ResNet classes are executed from torchvision 0.28.0's own ``models/resnet.py`` (the
source of ``torchvision.models.resnet18``): on this project's CPU build of torch the PyPI
torchvision wheel cannot be imported (it is linked against CUDA torch), so the file is read
rather than imported. Written: the state-dict names and shapes of ``resnet18(weights=None,
num_classes=10)`` (BatchNorm), and logits of a few variants filled with deterministic
weights (:func:`fill`), which ``test_resnet.py`` compares geofl's ``resnet18`` against.
"""

from __future__ import annotations

import json
import re
import sys
from functools import partial
from pathlib import Path
from typing import Any, Callable, Optional, Union  # noqa: UP035 - names the source uses

import torch
from torch import Tensor, nn

OUT = Path(__file__).with_name("torchvision_resnet18.json")


def fill(state: dict[str, torch.Tensor], seed: int) -> dict[str, torch.Tensor]:
    """Deterministic values for every float tensor, drawn in sorted-name order."""
    gen = torch.Generator().manual_seed(seed)
    out = {}
    for name in sorted(state):
        t = state[name]
        if not t.is_floating_point():
            out[name] = t.clone()
        elif name.endswith("running_var"):
            out[name] = 0.5 + torch.rand(t.shape, generator=gen)
        else:
            out[name] = 0.05 * torch.randn(t.shape, generator=gen)
    return out


def load_torchvision(path: Path) -> dict[str, Any]:
    """``conv3x3`` … ``ResNet`` executed from torchvision's source."""
    src = path.read_text()
    start = src.index("def conv3x3")
    end = src.index("def _resnet(")
    ns: dict[str, Any] = {
        "torch": torch,
        "nn": nn,
        "Tensor": Tensor,
        "Optional": Optional,
        "Callable": Callable,
        "Union": Union,
        "_log_api_usage_once": lambda _: None,
    }
    exec(compile(src[start:end], str(path), "exec"), ns)
    version = path.parent.parent / "version.py"
    found = re.search(r"__version__ = '([^']+)'", version.read_text()) if version.exists() else None
    ns["_version"] = found.group(1) if found else "unknown"
    return ns


def main() -> None:
    tv = load_torchvision(Path(sys.argv[1]))
    ResNet, BasicBlock = tv["ResNet"], tv["BasicBlock"]
    ref = ResNet(BasicBlock, [2, 2, 2, 2], num_classes=10)  # = resnet18(num_classes=10)
    cases: dict[str, Any] = {}
    for case, bands, norm, small in [
        ("batch-3", 3, "batch", False),
        ("group-13", 13, "group", False),
        ("group-13-small", 13, "group", True),
    ]:
        norm_layer = nn.BatchNorm2d if norm == "batch" else partial(nn.GroupNorm, 32)
        model = ResNet(BasicBlock, [2, 2, 2, 2], num_classes=10, norm_layer=norm_layer)
        if small:
            model.conv1 = nn.Conv2d(bands, 64, 3, 1, 1, bias=False)
            model.maxpool = nn.Identity()
        else:
            model.conv1 = nn.Conv2d(bands, 64, 7, 2, 3, bias=False)
        model.load_state_dict(fill(model.state_dict(), seed=0))
        x = torch.randn(2, bands, 64, 64, generator=torch.Generator().manual_seed(1))
        with torch.no_grad():
            logits = model.eval()(x)
        cases[case] = {
            "bands": bands,
            "norm": norm,
            "small_input_stem": small,
            "logits": logits.tolist(),
        }
    source = (
        f"torchvision {tv['_version']} models/resnet.py: ResNet(BasicBlock, [2, 2, 2, 2], "
        "num_classes=10) = resnet18(weights=None, num_classes=10)"
    )
    state = ",\n  ".join(json.dumps([k, list(v.shape)]) for k, v in ref.state_dict().items())
    rows = ",\n  ".join(f"{json.dumps(k)}: {json.dumps(v)}" for k, v in cases.items())
    OUT.write_text(
        f'{{"source": {json.dumps(source)},\n "state": [\n  {state}\n ],\n'
        f' "cases": {{\n  {rows}\n }}\n}}\n'
    )
    json.loads(OUT.read_text())
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
