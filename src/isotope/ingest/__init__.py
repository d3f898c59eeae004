"""Ingest: from files to stored chunks, atoms and questions.

The stages, each a module: ``discovery`` (which files), ``changes`` (what changed since),
loaders (:mod:`isotope.loaders`), ``chunking`` (with ``sentences``), ``atomizers``,
``contextual`` (a chunk situated in its document), ``questions`` and ``generation`` (the
model's questions, parsed and checked), ``assembly`` and ``selection`` (what is kept),
``enrichment`` and ``windows`` (questions generated later, a window of atoms at a time),
``references`` (files read by reference), ``planning`` (the dry run) and
``maintenance`` (sync, removals, repair). ``pipeline`` runs them
(:class:`isotope.ingest.pipeline.Pipeline`, driven by :class:`isotope.Isotope`)."""
