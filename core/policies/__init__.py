"""Cache policies: importing this package registers every built-in one."""

from core.params import Param
from core.policies import d2cache, dkv_cache, dllm_cache, elastic, entropy, fastdllm, none  # noqa: F401  (registration)
from core.policies.base import CachePolicy, Outcome, Plan, StepContext
from core.policies.registry import POLICIES, make_policy, register

# Every built-in policy, in the order tables list them: the exact decoder (the reference), ours, the peers.
TABLE_ORDER = ("none", "entropy", "dual", "prefix", "dllm-cache", "dkv-cache", "d2cache", "elastic")

__all__ = ["CachePolicy", "Outcome", "Param", "Plan", "POLICIES", "StepContext", "TABLE_ORDER", "make_policy",
           "register"]
