"""`ztbp watch DEV` on this machine: the streaming probe's process, the device's module around it, the signals that
stop the session cleanly, and the session fed with the probe's rows in time order."""

from __future__ import annotations

import signal
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from ..acquire.module import LOAD_TIMEOUT_S, DeviceModule
from ..analysis.params import ORDER_MAX_ROWS, ORDER_MIN_S, ORDER_SPAN_S
from ..contract import NVME_VERSION_LINE
from ..errors import ZtbpError
from ..io.journal import ATTACHED, MODULE, Journal
from ..io.probe_lines import Batch, ProbeLines, TimeOrder
from .probe_process import ProbeProcess, Started, start_stream
from .watch import Session, WatchRequest, warm_up
from .watch_device import CtlDevice


def attached(lines: Iterable[bytes], journal: Journal) -> Iterator[bytes]:
    """The probe's lines, with an "attached" record in the journal at its header (bpftrace prints it from BEGIN,
    once every probe is attached): from then on every command is traced, so a workload started after it is whole."""
    said = False
    for line in lines:
        if not said and line.strip() == NVME_VERSION_LINE.encode():
            journal.write(ATTACHED, probe=line.decode("utf-8", "replace").strip())
            said = True
        yield line


class ModuleHold:
    """The device's module around the streaming probe (`ztbp watch --module`, NVMeVirt): loaded once the probe's
    header arrives (bpftrace prints it from BEGIN, when every probe is attached), unloaded when the session lets go
    of the device and before bpftrace is told to detach, which it cannot do while the module's threads stall
    RCU-tasks grace periods (acquire/module.py)."""

    def __init__(self, module: DeviceModule, dev: str, timeout_s: float = LOAD_TIMEOUT_S) -> None:
        self.module, self.dev, self.timeout_s = module, dev, timeout_s
        self.loaded = False
        self.done = False  # unloaded, or let go of before it was loaded: never loaded again

    def load(self, journal: Journal) -> None:
        if self.loaded or self.done:
            return
        what = {"ko": str(self.module.ko), "params": self.module.params, "device": self.dev}
        try:
            appeared = self.module.load(self.dev, self.timeout_s)
        except ZtbpError as e:
            self.done = True
            journal.write(MODULE, action="failed", **what, error=str(e))
            raise
        self.loaded = True
        journal.write(MODULE, action="loaded", **what, appear_s=round(appeared, 3))

    def unload(self) -> dict[str, Any]:
        """rmmod, once; what was done, for the stop record."""
        self.done = True
        if not self.loaded:
            return {"module": "not loaded"}
        try:
            self.module.unload()
        except ZtbpError as e:
            return {"module": f"{e} (bpftrace cannot detach while it stays loaded)"}
        self.loaded = False
        return {"module": f"{self.module.name} unloaded"}

    def around(self, lines: Iterable[bytes], session: Session, probe: ProbeProcess,
               stop_asked: Callable[[], bool]) -> Iterator[bytes]:
        """The probe's lines, the module loaded at its header; once a stop is asked (a signal), the session lets go
        of the device (its STOP, then the module's unload: session.on_release) and only then is bpftrace told to
        stop: its last lines are still read to the end."""
        header = NVME_VERSION_LINE.encode()
        for line in lines:
            if stop_asked() and session.released is None:
                session.release()
                probe.stop()
            if session.released is None and line.strip() == header:
                self.load(session.journal)
            yield line


def watch_device(req: WatchRequest, dev: str, on_window: Callable[[Session], None] | None = None,
                 module: DeviceModule | None = None, started: Started | None = None) -> dict[str, Any]:
    """`ztbp watch DEV`: the streaming probe on this machine's zoned namespace DEV, the session, ztbp-ctl on DEV.
    SIGTERM and SIGINT stop the session cleanly (bpftrace detached, the journal closed).

    `started`: the device checked and its probe started already (control/probe_process.start_stream, which
    `ztbp watch` calls before it loads this module, so bpftrace compiles while the analysis loads); else it is done
    here. The session's analysis then runs once on a synthetic window (warm_up) while bpftrace compiles, before the
    probe's first line is read.

    With `module` (a module that creates DEV when loaded, NVMeVirt): the geometry is read with the module loaded
    for that moment and unloaded again; the probe starts; the module is loaded when the probe's header arrives; at
    the end (the source ended, a signal, an error) the device's STOP (--on-exit stop, a set in force), then the
    module's unload, then bpftrace's stop. A module that fails to load ends the session with its error, the probe
    detached."""
    if started is None:
        started = start_stream(dev, module)
    elif module is not None and module is not started.module:
        raise ValueError("watch_device: the module is the started stream's (start_stream(dev, module))")
    module, probe = started.module, started.probe
    caught: list[str] = []
    hold = ModuleHold(module, dev) if module is not None else None
    try:
        req.meta = dict(started.meta)
        req.warm_up_s = round(warm_up(req.meta, req.params), 3)
    except BaseException:
        probe.close()
        raise

    def on_signal(signum: int, frame: Any) -> None:
        # never raise in the middle of a window: ask bpftrace to stop; the session reads its last rows to the end
        # (with a module, ModuleHold.around stops it once the module is unloaded)
        caught.append(signal.Signals(signum).name)
        if hold is None:
            probe.stop()

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    session: Session | None = None
    try:
        session = Session(req, CtlDevice(dev), on_window=on_window)
        lines: Iterable[bytes] = attached(probe.lines(), session.journal)
        if hold is not None:
            session.on_release = hold.unload
            lines = hold.around(lines, session, probe, lambda: bool(caught))
        source: Iterable[Batch] = ProbeLines(lines, req.meta["zone_size_lba"])
        if req.order_max_s:
            source = TimeOrder(source, min_s=ORDER_MIN_S, max_s=req.order_max_s, max_rows=ORDER_MAX_ROWS,
                               span_s=ORDER_SPAN_S)
        return session.run(source, lambda: f"interrupted ({caught[0]})" if caught else None)
    finally:
        try:
            if session is not None:
                session.release()  # done already unless the journal failed: STOP, the module's unload
            elif hold is not None:
                hold.unload()
        finally:
            probe.close()  # never leave bpftrace running, whatever happened
            for sig, handler in previous.items():
                signal.signal(sig, handler)
