"""The tools layer: command lines over everything below (reproduce, bench, the shipped models' check and rebuild, calibrations)."""
