"""``POST .../trials/{token}/tail``: what a trial's process spent after its finish, added to its record (issue 46)."""

from __future__ import annotations

import pytest

from zeus_run.remote import ServerError

SPEC = """
name: tailed
command: ["python", "train.py"]
batch_sizes: [8, 16]
default_batch_size: 8
target_metric: 0.9
max_epochs: 3
recurrences: 3
energy: {source: estimate, watts: 100, basis: wall-time}
"""


def test_a_tail_is_refused_before_the_finish_and_added_to_the_record_after_it(server):
    client = server.client()
    client.register("tailed", SPEC)
    token = client.ask("tailed")["token"]
    client.report("tailed", token, 1, 0.95, 1.0, 100.0)
    with pytest.raises(ServerError) as refused:
        client.tail("tailed", token, 2.0, 200.0, "exit")
    assert refused.value.status == 409 and refused.value.code == "not_told"
    record = client.finish("tailed", token, 1.0, 100.0)
    assert record["after_time"] is None or record["after_time"] < 2.0
    client.tail("tailed", token, 2.0, 200.0, "exit")
    (after,) = client.history("tailed")
    assert after["after_time"] == pytest.approx((record["after_time"] or 0.0) + 2.0)
    assert after["after_energy"] == pytest.approx((record["after_energy"] or 0.0) + 200.0)
    assert after["window"]["to"] == "exit" and after["cost"] == record["cost"]
    with pytest.raises(ServerError) as bad:
        client.tail("tailed", token, -1.0, 200.0, "exit")
    assert bad.value.status == 422
