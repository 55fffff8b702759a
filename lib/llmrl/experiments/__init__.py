"""The experiments layer, shared by the labs and hw4: arms x seeds and their results, figures, and the live checks of a run against the reference."""
