"""The public-docs zoo: Debian documentation packages as a standing benchmark (see ``corpora``)."""
