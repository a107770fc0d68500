"""`ztbp doctor`: what this machine has for the host path (facts.py, the one place that looks) and what each fact
means for it (verdicts.py, pure)."""
