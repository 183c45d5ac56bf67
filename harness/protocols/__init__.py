"""What a protocol that calls the model again needs from the core: re-entering a finished run folder
on exactly its backend (``session``) and the removable entries of a method's artifact (``entries``).

The protocols' own algorithms and their statistics (prequential, harmful-entry; ``reports/protocols/``)
build on these; reports read the results and render them.
"""
