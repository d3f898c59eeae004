"""Opening an index: which index a path or name means and the settings it is opened with
(:mod:`isotope.opening.settled`), and what the index's meta says of itself when opened
(:mod:`isotope.opening.meta`: the settings it was made with and those it fixed, its
embedding model, what its first open writes). What :meth:`isotope.Isotope.open` and the
:class:`~isotope.Isotope` constructor run."""
