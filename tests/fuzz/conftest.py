"""Prints the fuzzer's counters (calls, eager errors, captures, hits, fallbacks and their
reasons) at the end of the session."""

from __future__ import annotations


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    store = config.__dict__.get("_trident_fuzz_stats")
    if not store:
        return
    terminalreporter.section("trident fuzz summary")
    for title, stats in store.items():
        terminalreporter.write_line(stats.summary(title))
