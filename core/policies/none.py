"""The exact baseline: a full forward at every step, nothing reused."""

from core.policies.base import CachePolicy, Plan, StepContext
from core.policies.registry import register


@register("none")
class NoCache(CachePolicy):
    def plan(self, ctx: StepContext) -> Plan:
        return Plan(None, "no cache: every row")
