"""The batch report: papermill runs the notebooks on a run, nbconvert renders an offline HTML report."""
