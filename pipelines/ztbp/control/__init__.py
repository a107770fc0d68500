"""The control room: the closed loop over capture, analysis and write-back (decide, apply, verify, stop)."""
