"""AppWorld for SourceBench: the benchmark adapter, its agent scaffold and the documentation channel.

``benchmark.py`` is the adapter, ``agent.py`` the ReAct code loop, ``channel.py`` the documentation
channel, ``environment.py`` the environment boundary, ``install.py`` the separate AppWorld venv and
``worker.py`` the script that runs inside it.
"""

from .benchmark import AppWorld, scenario_goal_completion

__all__ = ["AppWorld", "scenario_goal_completion"]
