"""Reading a run: the run-directory contract of probes/FORMAT.md turned into typed frames (one Run object)."""
