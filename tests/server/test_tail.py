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


def _refusal(call, *args) -> ServerError:
    """The server's refusal of ``call(*args)``; where it accepted them, an assertion fails that says so (a planted
    bug is then caught by an assertion, never by pytest's "DID NOT RAISE")."""
    try:
        call(*args)
    except ServerError as exc:
        return exc
    raise AssertionError(f"the server accepted {args!r}: it must refuse them")


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


def _told(client, job="tailed"):
    token = client.ask(job)["token"]
    client.report(job, token, 1, 0.95, 1.0, 100.0)
    client.finish(job, token, 1.0, 100.0)
    return token


def test_a_tail_beyond_the_finishs_bound_is_refused_and_the_genuine_one_lands_after_it(server):
    """Issue 54, 1: 1e14 J in 1 s was accepted (a finish refuses 1e9 J with 422), and the genuine tail then
    ignored."""
    client = server.client()
    client.register("tailed", SPEC)
    token = _told(client)
    forged = _refusal(client.tail, "tailed", token, 1.0, 1e14, "exit")
    assert forged.status == 422 and forged.field == "body.energy", forged
    client.tail("tailed", token, 2.0, 200.0, "exit")
    (after,) = client.history("tailed")
    assert after["window"]["tail_j"] == 200.0


def test_a_tail_for_a_token_never_asked_is_404_and_nothing_is_appended(server):
    client = server.client()
    client.register("tailed", SPEC)
    _told(client)
    for i in range(3):
        unknown = _refusal(client.tail, "tailed", f"nobody-asked-{i}", 1.0, 1.0, "exit")
        assert unknown.status == 404 and unknown.code == "unknown_trial", unknown
    assert not (server.root / "tailed" / "tails.jsonl").exists()


def test_one_tail_per_trial_the_same_one_again_accepted_another_409(server):
    client = server.client()
    client.register("tailed", SPEC)
    token = _told(client)
    client.tail("tailed", token, 2.0, 200.0, "exit")
    client.tail("tailed", token, 2.0, 200.0, "exit")  # a retried POST: accepted, not written twice
    other = _refusal(client.tail, "tailed", token, 3.0, 50.0, "next-ask")
    assert other.status == 409 and other.code == "tail_conflict", other
    lines = (server.root / "tailed" / "tails.jsonl").read_text().splitlines()
    assert len(lines) == 1, lines
    (after,) = client.history("tailed")
    assert (after["window"]["tail_s"], after["window"]["tail_j"]) == (2.0, 200.0)
