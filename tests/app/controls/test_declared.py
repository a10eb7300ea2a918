"""The controls come from the declarations (app/controls/declared.py): EntropyCache's parameters and
the decode settings."""

from __future__ import annotations

import pytest

from app.controls.declared import RUN_CONTROLS
from core.decoder import DecodeConfig
from core.policies import POLICIES


def test_entropycache_controls_come_from_its_declared_parameters() -> None:
    declared = POLICIES["entropy"].parameters
    assert [p.name for p in declared] == ["tau", "k"] == list(RUN_CONTROLS)[:2]
    for p in declared:
        c = RUN_CONTROLS[p.name]
        assert c.param is p and c.slider_range == p.slider_range and c.default == p.default and c.info == p.help
        assert c.label.startswith(p.name)


def test_decode_controls_come_from_the_decode_settings_declarations() -> None:
    """gen length, block, steps, threshold, temperature, seed: DecodeConfig's declarations as controls;
    an optional one (steps, threshold) shows unset as 0, which no setting of it can be."""
    assert list(RUN_CONTROLS)[2:] == [p.name for p in DecodeConfig.parameters]
    for p in DecodeConfig.parameters:
        c = RUN_CONTROLS[p.name]
        assert c.param is p and c.label == (p.label or p.name) and p.help in c.info
        if p.default is None:
            assert c.default == 0 and c.slider_range == (0, p.slider_range[1]) and c.setting(c.check(0)) is None
            with pytest.raises(ValueError):
                p.check(0)  # no setting of it: on a slider, 0 can only mean unset
        else:
            assert c.slider_range == p.slider_range and c.default == p.default
