"""``import mlflow`` for tests: a double of the parts of MLflow's client that zeus-run's exporter uses.

Put ``tests/fake_mlflow`` first on ``PYTHONPATH`` and set ``FAKE_MLFLOW_STORE`` to a JSON file: every
process of a test (a launcher, a tell, a server) then reads and writes one store, whatever the tracking
URI says. Each call locks the file, reads it, changes it and writes it back. `tests.fake_mlflow.store` reads
it for the test's assertions. Filters are the ones the exporter writes: ``tags.`key` = 'value'`` joined by
``and``.
"""

from mlflow import entities, exceptions, tracking

__version__ = "0.0+fake"
__all__ = ["entities", "exceptions", "tracking"]
