"""The governance closed loop of 000 §3.5 and §4.7, driven by a run's round records.

Per round (after aggregation): observe every governed node → reputation (Eq. 18–22) →
committee election every R rounds (Eq. 23) → aggregation commitment → permission
triggers → proposals ⟨u, L_old, L_new, reason, round⟩ (Eq. 24) approved on chain by the
current committee → the permission levels the engine enforces next round.

The same :class:`GovernanceProcess` runs live (as an engine subscriber,
:mod:`geofl.governance.subscriber`) and offline from a finished run directory (the
paper's setting, "real off-chain training results"): it reads only the round records, the
partition's label histograms and the resolved config, so both modes write identical
ledgers. It never changes the optimisation; the only feedback is :meth:`allows`, which
bars suspended and removed nodes from later rounds.

Observation choices (the paper leaves them open; all documented in the record):
    * participated: the node's update was accepted this round (True); it was sampled but
      lost or rejected (False); it was not sampled or was barred (not expected).
    * ΔAcc_i (Eq. 19) is the round's change in global validation accuracy attributed by
      aggregation weight, α_i·|P|·(Acc_val^(t) − Acc_val^(t−1)): a participant with the
      mean weight is credited with the whole change, one weighted twice as much with
      twice of it. It is a first-order stand-in for leave-one-out that needs no extra
      evaluation and is reproducible from the round log; None in round 1.
    * S_i (Eq. 19) is the JS-consistency score of 000 Eq. 15 of the node's shared label
      histogram against the participants' pool (β = ``consistency_beta``).
    * Behaviour: the L2 norm of the received update and its perturbation intensity as the
      server observes it, σ̂ = 1.4826·MAD of the update's coordinates
      (:func:`geofl.update.noise_scale`, ``RoundRecord.update_noise``), which tracks the
      added noise and, unlike the RMS ‖Δw̃‖/√D, is not a function of the norm (with the
      RMS, Eq. 21 would weigh the norm twice). Records written before σ̂ existed fall back
      to the RMS. The client's own release log (its σ and risk level) is never read.
    * Data protection (§3.5.2 item 2: "nodes with stronger data protection capability are
      assigned higher election weights"): with ``committee.protection_weight`` γ > 0 a
      candidate's weight Rep^α is multiplied by 1 + γ·p, p = its mean σ̂ over the
      reputation window divided by the largest candidate's (server-observed, so a node
      cannot claim protection it does not apply). γ = 0 (default) is Eq. 23 as printed.
    * A round without a finite validation accuracy, or whose previous round was not
      evaluated, gives no ΔAcc (the accuracy term is skipped for that round).
    * If fewer committee-eligible validators than seats remain (absent, suspended, …) the
      previous committee stays in office and the round's log says why.
    * Committee members approve a proposal after re-checking its trigger off-chain; here
      every member of the current committee approves in turn until the majority is
      reached, each approval a transaction signed by that member.
"""

from __future__ import annotations

import json
import logging
import math
from collections import deque
from collections.abc import Iterable
from dataclasses import asdict
from typing import Any

import numpy as np
import torch

from geofl.governance.committee import (
    elect_committee,
    election_id_for_round,
    is_election_round,
)
from geofl.governance.config import GovernanceConfig
from geofl.governance.ledger import Ledger, Role, hash_json
from geofl.governance.permissions import (
    PermissionLevel,
    PermissionObservation,
    PermissionPolicy,
    committee_eligible,
    participation_allowed,
)
from geofl.governance.permissions import (
    PermissionState as PolicyState,
)
from geofl.governance.reputation import NodeObservation, ReputationTracker
from geofl.records import Rejection, RejectionReason, RoundRecord
from geofl.server.consistency import consistency_scores

__all__ = [
    "COORDINATOR",
    "GovernanceProcess",
    "node_name",
    "rule_document",
    "validation_rejected",
]

log = logging.getLogger("geofl")

#: Node id of the coordinator (the contract's deployer).
COORDINATOR = "coordinator"
#: Node id of the audit node.
AUDITOR = "auditor"


def node_name(client: int) -> str:
    """The ledger's node id of a client (``client7``)."""
    return f"client{client}"


def rule_document(resolved_config: dict[str, Any]) -> dict[str, Any]:
    """What the rule commitment hashes: the resolved config, governance rules included."""
    return {"config": resolved_config, "governance": resolved_config.get("governance")}


class GovernanceProcess:
    """Reputation, committees and permissions of one (method, seed) run, on a ledger.

    Args:
        cfg: Governance configuration.
        ledger: A fresh ledger with the contract deployed.
        seed: The run's seed (committee draws derive from it).
        num_clients: K.
        histograms: ``[K, C]`` label histograms of the clients (shared with the server).
        resolved_config: The run's resolved config (hashed into the rule commitment).
        num_params: D, for the update RMS (0 if unknown: no intensity feature).
    """

    def __init__(
        self,
        cfg: GovernanceConfig,
        *,
        ledger: Ledger,
        seed: int,
        num_clients: int,
        histograms: np.ndarray,
        resolved_config: dict[str, Any],
        num_params: int = 0,
    ) -> None:
        self.cfg, self.ledger, self.seed = cfg, ledger, seed
        self.nodes = sorted(cfg.nodes if cfg.nodes is not None else range(num_clients))
        self.validators = sorted(cfg.validators if cfg.validators is not None else self.nodes)
        self.histograms = np.asarray(histograms)
        self.resolved_config = resolved_config
        self.tracker = ReputationTracker(cfg.reputation)
        self.policy = PermissionPolicy(cfg.permissions)
        self.levels: dict[int, PermissionLevel] = {}
        self.committee: list[int] = []
        self.num_params = num_params
        self._prev_val: tuple[int, float] | None = None
        self._sigma: deque[dict[int, float]] = deque(maxlen=cfg.reputation.window)

    # ------------------------------------------------------------------ setup
    def start(self, label: str) -> dict[str, Any]:
        """Bind roles and commit the rule record; returns the log entry."""
        led = self.ledger
        led.grant_role(AUDITOR, Role.AUDIT)
        for n in self.nodes:
            role = Role.TRAINING | (Role.VALIDATION if n in self.validators else Role(0))
            led.grant_role(node_name(n), role)
        rule_hash = hash_json(rule_document(self.resolved_config))
        rc = led.commit_rule(rule_hash, label)
        return {"event": "rule", "label": label, "rule_hash": rule_hash, "tx": rc.tx_hash}

    def allows(self, client: int) -> bool:
        """Whether the permission level lets ``client`` train (000 §3.5.3)."""
        return participation_allowed(self.levels.get(client, PermissionLevel.ACTIVE))

    # ------------------------------------------------------------------ one round
    def _observations(self, record: RoundRecord) -> dict[int, NodeObservation]:
        participants = record.participants
        failed = set(record.failed_clients)
        # effective aggregation weights (Krum: the selected update only)
        weights = dict(zip(participants, record.weights, strict=False))
        norms = dict(zip(participants, record.update_norms, strict=False))
        r = record.round
        acc = None if record.val is None else record.val.values.get("accuracy")
        val = float(acc) if acc is not None and math.isfinite(float(acc)) else None
        prev = self._prev_val
        gain = None if val is None or prev is None or prev[0] != r - 1 else val - prev[1]
        self._prev_val = None if val is None else (r, val)
        scores: dict[int, float] = {}
        if participants:
            s = consistency_scores(
                torch.as_tensor(self.histograms[participants]), beta=self.cfg.consistency_beta
            )
            scores = dict(zip(participants, s.tolist(), strict=True))
        root_d = math.sqrt(self.num_params) if self.num_params > 0 else None
        if len(record.update_noise) == len(participants):
            sigma = dict(zip(participants, record.update_noise, strict=True))
        else:  # records written before σ̂ existed: the RMS
            sigma = {n: v / root_d for n, v in norms.items()} if root_d else {}
        out: dict[int, NodeObservation] = {}
        for n in self.nodes:
            if n in weights:
                share = weights[n] * len(participants)  # α_i / mean α
                d_acc = None if gain is None else float(np.clip(share * gain, -1, 1))
                out[n] = NodeObservation(
                    participated=True,
                    delta_acc=d_acc,
                    consistency=float(np.clip(scores[n], 0.0, 1.0)),
                    update_norm=float(norms.get(n, 0.0)),
                    noise_sigma=sigma.get(n),
                )
            elif n in failed:
                out[n] = NodeObservation(participated=False)
        return out

    def _protection(self, candidates: list[int]) -> dict[int, float]:
        """p = mean observed σ̂ over the reputation window ÷ the largest candidate's."""
        means = {}
        for n in candidates:
            seen = [w[n] for w in self._sigma if n in w]
            means[n] = float(np.mean(seen)) if seen else 0.0
        top = max(means.values(), default=0.0)
        return {n: (m / top if top > 0 else 0.0) for n, m in means.items()}

    def round(self, record: RoundRecord) -> dict[str, Any]:
        """Run the governance steps for one round record; returns the round's log entry."""
        r = record.round
        led, cfg = self.ledger, self.cfg
        observed = self._observations(record)
        self._sigma.append(
            {n: o.noise_sigma for n, o in observed.items() if o.noise_sigma is not None}
        )
        comps = self.tracker.update(r, observed)
        entry: dict[str, Any] = {
            "round": r,
            "reputation": {str(n): asdict(c) for n, c in comps.items()},
        }
        if is_election_round(r, every=cfg.committee.every, first_round=cfg.committee.first_round):
            # 1-based on chain (the contract requires strictly increasing ids from 0).
            eid = 1 + election_id_for_round(
                r, every=cfg.committee.every, first_round=cfg.committee.first_round
            )
            eligible = [
                v
                for v in self.validators
                if v in comps and committee_eligible(self.levels.get(v, PermissionLevel.ACTIVE))
            ]
            if len(eligible) < cfg.committee.size:
                why = (
                    f"election {eid}: {len(eligible)} eligible validators for "
                    f"{cfg.committee.size} seats; the previous committee stays"
                )
                log.warning("round %d: %s", r, why)
                entry["committee_skipped"] = why
            else:
                rec = elect_committee(
                    reputation={n: c.reputation for n, c in comps.items()},
                    params=cfg.committee,
                    seed=self.seed,
                    election_id=eid,
                    round_id=r,
                    validators=eligible,
                    protection=(
                        self._protection(eligible) if cfg.committee.protection_weight else None
                    ),
                )
                self.committee = list(rec.members)
                rc = led.record_committee(
                    eid, r, [node_name(m) for m in rec.members], "0x" + rec.seed_commitment
                )
                entry["committee"] = {**rec.to_dict(), "tx": rc.tx_hash}
        if record.model_sha256:
            rc = led.commit_aggregation(
                r, "0x" + record.model_sha256, "0x" + record.update_set_sha256
            )
            entry["aggregation"] = {
                "model_hash": record.model_sha256,
                "update_set_hash": record.update_set_sha256,
                "tx": rc.tx_hash,
            }
        entry["permissions"] = self._permissions(r, record, comps)
        entry["levels"] = {str(n): int(self.levels.get(n, 0)) for n in self.nodes}
        return entry

    def _permissions(
        self, r: int, record: RoundRecord, comps: dict[int, Any]
    ) -> list[dict[str, Any]]:
        rejected = validation_rejected(record.rejected)
        obs = {
            n: PermissionObservation(
                reputation=c.reputation, failure_streak=c.miss_streak, rejected=n in rejected
            )
            for n, c in comps.items()
        }
        out = []
        state = PolicyState(levels=dict(self.levels))
        for prop in self.policy.evaluate(r, state, obs):
            pid, rc = self.ledger.propose_permission(
                node_name(prop.node),
                prop.old,
                prop.new,
                f"{prop.reason}: {prop.detail}" if prop.detail else str(prop.reason),
                r,
            )
            approvers: list[int] = []
            for member in self.committee:
                if self.ledger.proposal(pid).status != 1:  # no longer pending: executed
                    break
                self.ledger.approve(pid, node_name(member))
                approvers.append(member)
            level = int(self.ledger.permission(node_name(prop.node)))
            self.levels[prop.node] = PermissionLevel(level)
            out.append(
                {
                    **prop.to_dict(),
                    "proposal_id": pid,
                    "approvers": approvers,
                    "committee": list(self.committee),
                    "applied": level == int(prop.new),
                    "tx": rc.tx_hash,
                }
            )
            log.info(
                "round %d: permission %s %s→%s (%s), approved by %s",
                r,
                node_name(prop.node),
                prop.old.name.lower(),
                PermissionLevel(level).name.lower(),
                prop.reason,
                approvers,
            )
        return out


def dumps(entry: dict[str, Any]) -> str:
    """One JSON line of the governance log."""
    return json.dumps(entry, sort_keys=True, default=str)


def validation_rejected(rejections: Iterable[Rejection]) -> set[int]:
    """The clients whose update server validation refused (000 §3.5.3's watchlist trigger).

    Only a malformed update is the node's fault: an upload lost in transit, one the 003
    uplink held back on the tractor (NQI below τ, or the checkpointer's cosine gate) and a
    round the client declined for its privacy budget are not rejections by validation.
    """
    return {x.client for x in rejections if x.reason == RejectionReason.MALFORMED}
