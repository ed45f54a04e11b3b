"""Front end: the ``microrag`` command line (``main.py``), each command group in its own module."""
