"""Cache policies: importing this package registers every built-in one."""

from core.policies import entropy, fastdllm, none, periodic  # noqa: F401  (registration)
from core.policies.base import CachePolicy, Outcome, Plan, StepContext
from core.policies.params import Param
from core.policies.registry import POLICIES, make_policy, register

__all__ = ["CachePolicy", "Outcome", "Param", "Plan", "StepContext", "POLICIES", "make_policy", "register"]
