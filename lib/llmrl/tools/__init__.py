"""The tools layer: command lines over everything below (reproduce, bench, the models' cache and rebuild, calibrations)."""
