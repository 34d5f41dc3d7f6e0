"""Fuzzing the operators as a hostile user would: generated calls (cases.py) run in worker processes (worker.py)
and judged against torch (reference.py); campaign.py counts deaths and hangs the workers cannot report. Garbage a
C caller could pass the libraries' exported functions (raw_cases.py) runs in raw_worker.py's processes.

    python -m aot_ops fuzz --cases 5000 --raw-cases 1000 --raw-catalogue
"""
from .campaign import FAILURES, Report, run, run_raw

__all__ = ["run", "run_raw", "Report", "FAILURES"]
