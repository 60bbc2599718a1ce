"""Cosine checkpointer (003 Alg. 1 lines 2–5)."""

from __future__ import annotations

import pytest
import torch

from geofl.client.checkpointer import cosine_gate, row_cosine


def test_row_cosine_by_hand() -> None:
    a = torch.tensor([[1.0, 0.0], [1.0, 1.0], [0.0, 0.0]])
    b = torch.tensor([[1.0, 0.0], [1.0, -1.0], [1.0, 0.0]])
    cos, dot = row_cosine(a, b)
    torch.testing.assert_close(cos, torch.tensor([1.0, 0.0, 0.0]))
    torch.testing.assert_close(dot, torch.tensor([1.0, 0.0, 0.0]))


def test_gate_holds_redundant_updates_only() -> None:
    ref = torch.tensor([[1.0, 0.0], [1.0, 0.0], [1.0, 0.0]])
    upd = torch.tensor([[2.0, 0.01], [0.0, 1.0], [2.0, 0.01]])
    has = torch.tensor([True, True, False])
    g = cosine_gate(upd, ref, has, tau_cos=0.01)  # hold when 1 − cos < 0.01
    assert g.send.tolist() == [False, True, True]  # row 3: nothing sent before
    assert float(g.cosine[0]) > 0.99 and float(g.cosine[2]) == 0.0
    # with τ_dot the inner product must also be stable: 2.0 vs previous 1.0 → send
    g2 = cosine_gate(upd, ref, has, 0.01, tau_dot=0.5, dot_prev=torch.tensor([1.0, 0, 0]))
    assert g2.send.tolist() == [True, True, True]
    g3 = cosine_gate(upd, ref, has, 0.01, tau_dot=1.5, dot_prev=torch.tensor([1.0, 0, 0]))
    assert g3.send.tolist() == [False, True, True]
    assert cosine_gate(upd, ref, has, tau_cos=0.0).send.all()
    with pytest.raises(ValueError, match="tau_cos"):
        cosine_gate(upd, ref, has, tau_cos=3.0)
