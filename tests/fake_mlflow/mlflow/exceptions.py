"""MLflow's exception (the double's)."""


class MlflowException(Exception):
    pass
