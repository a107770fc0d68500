"""Pure analyses: (events, geometry, parameters) in, results out. No argparse, printing or file paths here."""
