"""004 Table 6's sweep runs under the same calibrated backdoor as Table 3 (issue 35).

paper004-table6 says it runs "the trigger-patch backdoor of paper004-table3", but it kept the
stated 3×3 ±2σ patch without boost after Table 3 moved to the calibrated 4×4 ±4σ patch with
γ = 4; its ASR column could then not be read beside Table 3's DUAL-SHIELD row.
"""

from __future__ import annotations

from geofl.config.load import load_config


def test_table6_backdoor_is_table3s_calibrated_backdoor() -> None:
    t3 = next(m for m in load_config("paper004-table3").methods if m.name == "fedavg")
    assert t3.attack is not None
    rows = load_config("paper004-table6").methods
    assert len(rows) == 13
    for m in rows:
        assert m.attack is not None, m.name
        assert m.attack.name == t3.attack.name == "backdoor"
        assert m.attack.params == t3.attack.params, m.name
        assert m.attack.params["boost"] == 4.0  # γ, §2.3's colluded scaling factor
