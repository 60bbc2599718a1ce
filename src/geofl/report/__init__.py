"""Summaries over seeds and the static HTML report of a run directory.

``write_report(run_dir)`` is the entry point: it rewrites ``summary.json`` and renders
``report/index.html`` with its figures.
"""

from __future__ import annotations

from geofl.report.html import write_report
from geofl.report.summary import summarize_run, write_summary

__all__ = ["summarize_run", "write_report", "write_summary"]
