"""`ztbp watch`'s live view: the status line on the terminal and the session's closing summary."""

from __future__ import annotations

from typing import Any

from ..analysis.watch import WatchParams, WatchState, clock_text, next_apply_at


def status_line(commands: int, seconds: float, lost: int, state: WatchState, last: dict[str, Any] | None,
                params: WatchParams, now: float) -> str:
    """commands/s, lost events, the hot set in force, the last decision and when the next apply is allowed."""
    rate = commands / seconds if seconds > 0 else 0.0
    force = ",".join(str(z) for z in state.in_force) or "none"
    at = next_apply_at(state, params, now)
    nxt = "now" if at <= now else ("never (budget 0)" if at == float("inf") else clock_text(at))
    action = last["action"] if last else "none yet"
    return (f"{rate:,.0f} cmd/s | lost {lost} | in force: {force} | last: {action} | next apply allowed: {nxt}")


def summary_text(summary: dict[str, Any]) -> str:
    """The closing lines of a session."""
    last = summary.get("last_decision") or {}
    force = ",".join(str(z) for z in summary["in_force"]) or "none"
    return (f"watch stopped ({summary['why']}): {summary['windows']} windows, {summary['commands']:,} commands, "
            f"{summary['lost']} lost; zones in force: {force}; device {summary['device']}\n"
            f"last decision: {last.get('reason', 'none')}")
