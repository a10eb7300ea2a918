"""The controls come from the declarations (app/controls/declared.py): EntropyCache's parameters and
the decode settings."""

from __future__ import annotations

import re

import pytest

from app.controls.declared import OURS, RUN_CONTROLS
from core.config import DecodeConfig
from core.policies import POLICIES


def test_entropycache_controls_come_from_its_declared_parameters() -> None:
    declared = POLICIES["entropy"].parameters
    assert [p.name for p in declared] == ["tau", "k", "scope"] == list(RUN_CONTROLS)[:3]
    for p in declared:
        c = RUN_CONTROLS[p.name]
        assert c.param is p and c.default == p.default and c.info == p.help
        assert p.choices or c.slider_range == p.slider_range  # scope is a dropdown of its choices
        assert c.label.startswith(p.label or p.name)


def test_decode_controls_come_from_the_decode_settings_declarations() -> None:
    """gen length, block, steps, threshold, temperature, seed: DecodeConfig's declarations as controls;
    an optional one (steps, threshold) shows unset as 0, which no setting of it can be."""
    ours = len(POLICIES[OURS].parameters)  # tau, k, scope first
    assert list(RUN_CONTROLS)[ours:] == [p.name for p in DecodeConfig.parameters]
    for p in DecodeConfig.parameters:
        c = RUN_CONTROLS[p.name]
        assert c.param is p and c.label == (p.label or p.name) and p.help in c.info
        if p.choices:  # a dropdown of names (alg, schedule), checked against them
            assert c.default == p.default and c.check(p.choices[-1]) == p.choices[-1]
            with pytest.raises(ValueError, match=re.escape(f"{c.label} must be one of {', '.join(p.choices)}")):
                c.check(0)
        elif p.default is None:
            assert c.default == 0 and c.slider_range == (0, p.slider_range[1]) and c.setting(c.check(0)) is None
            with pytest.raises(ValueError):
                p.check(0)  # no setting of it: on a slider, 0 can only mean unset
        else:
            assert c.slider_range == p.slider_range and c.default == p.default
