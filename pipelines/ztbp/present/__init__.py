"""What the notebooks and the CLI show: figures, text summaries and tables of analysis results."""
