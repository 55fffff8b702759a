"""Repository-wide pytest settings.

nbval waits only 5 seconds (a constant, no command-line option) for a cell's outputs to arrive on
the kernel's iopub channel after the cell has finished. On a loaded 2-core CI machine the kernel's
iopub thread can be starved for longer than that while torch keeps both cores busy, and nbval then
fails a cell that ran correctly ("Timeout of 5 seconds exceeded waiting for output") and marks the
rest of the notebook xfail. The cell's run time is still bounded by --nbval-cell-timeout; this only
gives the outputs of a finished cell time to arrive.
"""

NBVAL_OUTPUT_TIMEOUT_S = 120


def pytest_collection_modifyitems(items):
    for item in items:
        # nbval's cell items (nbval.plugin.IPyNbCell) carry the timeout as an instance attribute.
        if hasattr(item, "output_timeout") and type(item).__module__.startswith("nbval"):
            item.output_timeout = max(item.output_timeout, NBVAL_OUTPUT_TIMEOUT_S)
