"""The agent's upkeep, apart from its turn: the triggers (when reflection, consolidation,
the flush reminder, step compaction and daily logs are due, and what each does), the
durable jobs a turn leaves, and the background worker that runs them, so that
``AgentMemory.before`` and ``after`` never wait for an LLM.
"""

from memlane.agent.upkeep.jobs import Job
from memlane.agent.upkeep.service import Upkeep, UpkeepMode
from memlane.agent.upkeep.worker import Worker

__all__ = ["Job", "Upkeep", "UpkeepMode", "Worker"]
