"""Momentum reputation (004 Eq. 8–9): a hand-computed trajectory, the floor, absent
clients, and the Eq. 9 weights."""

from __future__ import annotations

import pytest
import torch

from geofl.server.reputation import (
    HraSettings,
    ReputationBook,
    reputation_step,
    reputation_weights,
)


def _round(book: ReputationBook, ids: list[int], hard: list[bool], soft: list[float]) -> None:
    book.update(torch.tensor(ids), torch.tensor(hard), torch.tensor(soft, dtype=torch.float64))


def test_trajectory_matches_a_hand_computation() -> None:
    book = ReputationBook(HraSettings(beta=0.9, r_min=0.1, r_init=0.5), num_clients=3)
    # round 1: client 0 accepted with m̃ = 0.8 → 0.9·0.5 + 0.1·0.8 = 0.53
    #          client 1 rejected (m = 0, m̃ = 0.3 is gated away) → 0.45
    _round(book, [0, 1], [True, False], [0.8, 0.3])
    assert book.r.tolist() == pytest.approx([0.53, 0.45, 0.5])
    # round 2: client 0 rejected → 0.477; client 2 accepted with m̃ = 1 → 0.55; 1 absent (held)
    _round(book, [0, 2], [False, True], [0.9, 1.0])
    assert book.r.tolist() == pytest.approx([0.477, 0.45, 0.55])
    # round 3: client 0 accepted with m̃ = 1 → 0.9·0.477 + 0.1 = 0.5293
    _round(book, [0], [True], [1.0])
    assert book.r.tolist() == pytest.approx([0.5293, 0.45, 0.55])


def test_floor_keeps_a_rejected_client_eligible() -> None:
    book = ReputationBook(HraSettings(beta=0.9, r_min=0.1), num_clients=1)
    for n in range(1, 20):
        _round(book, [0], [False], [0.0])
        assert float(book.r[0]) == pytest.approx(max(0.1, 0.5 * 0.9**n))
    assert float(book.r[0]) == 0.1  # 0.5·0.9^16 < 0.1: on the floor
    _round(book, [0], [True], [1.0])  # and it recovers: 0.9·0.1 + 0.1 = 0.19
    assert float(book.r[0]) == pytest.approx(0.19)


def test_absent_decay_rule() -> None:
    s = HraSettings(beta=0.9, r_min=0.1, absent="decay", absent_decay=0.5)
    book = ReputationBook(s, num_clients=3)
    _round(book, [0], [True], [1.0])  # 0 → 0.55; 1, 2 absent → max(0.1, 0.25) = 0.25
    assert book.r.tolist() == pytest.approx([0.55, 0.25, 0.25])
    _round(book, [0], [True], [1.0])  # 0 → 0.595; 1, 2 → max(0.1, 0.125)
    _round(book, [0], [True], [1.0])  # 1, 2 → max(0.1, 0.0625) = 0.1
    assert book.r[1:].tolist() == [0.1, 0.1]


def test_eq9_weights_over_the_survivors() -> None:
    r = torch.tensor([0.5, 0.2, 0.3, 0.9], dtype=torch.float64)
    w = reputation_weights(r, torch.tensor([True, True, True, False]))
    assert w.tolist() == pytest.approx([0.5, 0.2, 0.3, 0.0])
    zero = reputation_weights(torch.zeros(3, dtype=torch.float64), torch.tensor([1, 0, 1]).bool())
    assert zero.tolist() == [0.5, 0.0, 0.5]


def test_step_is_eq8() -> None:
    prev = torch.tensor([0.5, 0.5, 0.05], dtype=torch.float64)
    out = reputation_step(
        prev,
        torch.tensor([True, False, True]),
        torch.tensor([0.6, 0.6, 0.0], dtype=torch.float64),
        beta=0.92,
        r_min=0.1,
    )
    assert out.tolist() == pytest.approx([0.92 * 0.5 + 0.08 * 0.6, 0.46, 0.1])


def test_state_round_trips() -> None:
    book = ReputationBook(HraSettings(), num_clients=4)
    _round(book, [1, 3], [True, False], [0.7, 0.1])
    other = ReputationBook(HraSettings(), num_clients=4)
    other.load_state_dict(book.state_dict())
    assert torch.equal(other.r, book.r)
