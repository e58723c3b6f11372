"""The benchmarks, each a script run from the repository root as a module of this package:
``python -m bench.suite``, ``python -m bench.storage`` and so on (the Makefile's ``bench*``
targets, and docs/benchmarks.md). They start brokers and clusters with
:mod:`eventplatform.testing`, as the tests do, and import each other as ``bench.<module>``."""
