"""DecodeConfig beside the model's config: a model's declared decode settings, applied by for_model."""

import pytest
from tiny_models import tiny_model

from core.config import DecodeConfig
from core.loading import EMBEDDED, read_config


def test_a_models_declared_task_settings_apply_to_that_task_and_what_is_given_wins():
    cfg = tiny_model(task_settings={"stories": {"temperature": 0.7, "seed": 3}}).config
    assert DecodeConfig.for_model(cfg, task="stories").temperature == 0.7
    assert DecodeConfig.for_model(cfg, task="stories", temperature=0.0) == DecodeConfig.for_model(
        cfg, temperature=0.0, seed=3)
    assert DecodeConfig.for_model(cfg, task="words") == DecodeConfig.for_model(cfg)  # nothing declared for it
    assert DecodeConfig.for_model(cfg).temperature == 0.0
    with pytest.raises(ValueError, match="for 'stories' name no decode setting it may declare: temprature"):
        DecodeConfig.for_model(tiny_model(task_settings={"stories": {"temprature": 1}}).config, task="stories")
    with pytest.raises(ValueError, match="may declare: gen_len"):  # the lengths are the model's, whatever the task
        DecodeConfig.for_model(tiny_model(task_settings={"stories": {"gen_len": 8}}).config, task="stories")
    embedded, _, _ = read_config(EMBEDDED)
    assert embedded.task_settings == {"stories": {"temperature": 0.7}}  # greedy stories loop (BENCHMARKS)
