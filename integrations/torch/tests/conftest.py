import os
import sys

# harness.py and the example trainer import as top-level modules here and in the spawned ranks.
HERE = os.path.dirname(os.path.abspath(__file__))
for d in (HERE, os.path.join(os.path.dirname(HERE), "examples")):
    if d not in sys.path:
        sys.path.insert(0, d)
