"""Fuzzing the operators as a hostile user would: generated calls (cases.py) run in worker processes (worker.py)
and judged against torch (reference.py); campaign.py counts deaths and hangs the workers cannot report.

    python -m aot_ops fuzz --cases 5000
"""
from .campaign import FAILURES, Report, run

__all__ = ["run", "Report", "FAILURES"]
