"""zeus_run.slurm without a cluster: settings, argv, parsing, and errors (fake Slurm commands on PATH)."""

from __future__ import annotations

import stat
import subprocess
import textwrap
from pathlib import Path

import pytest

from zeus_run.slurm import (
    BatchJob,
    SlurmError,
    SlurmNotFoundError,
    SlurmSettings,
    SlurmSubmitError,
    cancel,
    exec_script,
    find_jobs,
    is_final,
    is_infrastructure_failure,
    job_name,
    parse_squeue,
    parse_time_limit,
    query,
    reserved_option,
    run_job_prefix,
    sbatch_command,
    submit,
)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("90", 5400),
        ("1:30", 90),
        ("02:00:00", 7200),
        ("1-0", 86400),
        ("1-02:03", 86400 + 7200 + 180),
        ("1-02:03:04", 86400 + 7200 + 180 + 4),
        (" 10 ", 600),
        ("UNLIMITED", None),
        ("infinite", None),
    ],
)
def test_slurm_time_formats(text: str, seconds: int | None) -> None:
    assert parse_time_limit(text) == seconds


@pytest.mark.parametrize("text", ["2h", "", "1:2:3:4", "1-2-3", "0", "00:00:00", "-5"])
def test_bad_slurm_times_are_refused_with_the_forms(text: str) -> None:
    with pytest.raises(ValueError, match="time"):
        parse_time_limit(text)


def test_time_limit_seconds_of_settings() -> None:
    assert SlurmSettings(time="01:00:00").time_limit_seconds == 3600
    assert SlurmSettings().time_limit_seconds is None


@pytest.mark.parametrize(
    ("arg", "reserved"),
    [
        ("--time=5", "--time"),
        ("--time", "--time"),
        ("-t5", "-t"),
        ("--output=x.log", "--output"),
        ("-J", "-J"),
        ("--gpus=2", "--gpus"),
        ("--mem=4G", None),
        ("--constraint=a100", None),
        ("-N2", None),
        ("a100", None),
    ],
)
def test_reserved_sbatch_options(arg: str, reserved: str | None) -> None:
    assert reserved_option(arg) == reserved


def test_sbatch_command_carries_every_setting(tmp_path: Path) -> None:
    job = BatchJob("zeus-demo-r0001-t01", "#!/bin/sh\n", tmp_path / "t" / "output.log", tmp_path)
    settings = SlurmSettings(
        partition="gpu", gpus=2, time="02:00:00", account="ml", qos="high", extra_args=("--mem=8G", "--exclusive")
    )
    assert sbatch_command(job, settings) == [
        "sbatch",
        "--parsable",
        "--job-name=zeus-demo-r0001-t01",
        f"--output={tmp_path}/t/output.log",
        f"--chdir={tmp_path}",
        "--no-requeue",
        "--open-mode=append",
        "--partition=gpu",
        "--gres=gpu:2",
        "--time=02:00:00",
        "--account=ml",
        "--qos=high",
        "--mem=8G",
        "--exclusive",
    ]


def test_sbatch_command_leaves_unset_settings_to_the_cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    argv = sbatch_command(BatchJob("j", "", Path("out.log"), Path(".")), SlurmSettings(gpus=0))
    assert argv == [
        "sbatch",
        "--parsable",
        "--job-name=j",
        f"--output={tmp_path}/out.log",
        f"--chdir={tmp_path}",
        "--no-requeue",
        "--open-mode=append",
    ]


def test_exec_script_passes_arguments_through_the_shell_unchanged(tmp_path: Path) -> None:
    args = ["it's", "a b", "$HOME", "`id`", "x;y", '"q"', "", "*"]
    script = tmp_path / "job.sh"
    script.write_text(exec_script(["printf", "[%s]\\n", *args], comment="trial r0001-t01\nsecond line"))
    out = subprocess.run(["sh", str(script)], capture_output=True, text=True, check=True, cwd=tmp_path).stdout
    assert out.splitlines() == [f"[{a}]" for a in args]
    assert script.read_text().startswith("#!/bin/sh\n# trial r0001-t01 second line\nexec ")
    with pytest.raises(ValueError):
        exec_script([])


def test_job_names_identify_run_and_trial(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    a = job_name("nightly resnet,v2", tmp_path / "a", "r0003-t01")
    b = job_name("nightly resnet,v2", tmp_path / "b", "r0003-t01")
    assert a != b  # same run name, different run directories
    assert a.startswith(run_job_prefix("nightly resnet,v2", tmp_path / "a"))
    assert a.endswith("-r0003-t01")
    assert " " not in a and "," not in a
    # The same directory, however it is spelled, gives the same names (a relaunch finds its jobs).
    (tmp_path / "a").mkdir()
    monkeypatch.chdir(tmp_path)
    assert job_name("x", Path("a"), "r1") == job_name("x", tmp_path / "b" / ".." / "a", "r1")


SQUEUE_OUT = (
    "41|RUNNING|None|0|n2|n2|2026-11-21T19:58:08|2026-11-21T19:58:09|2026-11-21T20:58:09|zeus-a-r0001-t01\n"
    "42|PENDING|Resources|0|||2026-11-21T19:58:10|N/A|N/A|name|with|bars\n"
    "43|TIMEOUT|TimeLimit|36608|n1|n1|2026-11-21T19:58:08|2026-11-21T19:58:09|2026-11-21T19:59:21|t\n"
    "44|CANCELLED|None|15|n1|n1|2026-11-21T19:58:08|2026-11-21T19:58:09|2026-11-21T19:59:21|c   \n"
    "\n"
)


def test_parse_squeue_reads_every_field() -> None:
    running, pending, timeout, cancelled = parse_squeue(SQUEUE_OUT)
    assert (running.job_id, running.state, running.batch_host, running.name) == (
        "41",
        "RUNNING",
        "n2",
        "zeus-a-r0001-t01",
    )
    assert running.exit_status is None and not running.final  # no exit status before the end
    assert (pending.state, pending.reason, pending.batch_host, pending.start_time) == (
        "PENDING",
        "Resources",
        None,
        None,
    )
    assert pending.name == "name|with|bars"
    assert (timeout.state, timeout.exit_code, timeout.exit_signal, timeout.final) == ("TIMEOUT", 143, 0, True)
    assert (cancelled.exit_code, cancelled.exit_signal, cancelled.name) == (0, 15, "c")


def test_parse_squeue_refuses_lines_it_cannot_read() -> None:
    with pytest.raises(SlurmError, match="cannot read squeue line"):
        parse_squeue("41|RUNNING|n2\n")


@pytest.mark.parametrize(
    ("state", "final", "infrastructure"),
    [
        ("PENDING", False, False),
        ("RUNNING", False, False),
        ("COMPLETING", False, False),
        ("COMPLETED", True, False),
        ("FAILED", True, False),
        ("OUT_OF_MEMORY", True, False),
        ("TIMEOUT", True, True),
        ("CANCELLED", True, True),
        ("NODE_FAIL", True, True),
        ("PREEMPTED", True, True),
        ("BOOT_FAIL", True, True),
    ],
)
def test_state_classes(state: str, final: bool, infrastructure: bool) -> None:
    assert (is_final(state), is_infrastructure_failure(state)) == (final, infrastructure)


# -- fake Slurm commands -----------------------------------------------------------------------


@pytest.fixture
def fake_bin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """Put fake Slurm commands on PATH (and nothing else named like them)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    log = tmp_path / "calls.log"

    def fake(name: str, body: str) -> Path:
        path = bin_dir / name
        path.write_text(f'#!/bin/sh\necho "{name} $*" >> {log}\n' + textwrap.dedent(body))
        path.chmod(path.stat().st_mode | stat.S_IEXEC)
        return log

    return fake


@pytest.fixture
def job(tmp_path: Path) -> BatchJob:
    return BatchJob("j", exec_script(["true"]), tmp_path / "out.log", tmp_path, env={"ZEUS_X": "1"})


def test_submit_returns_the_job_id_and_sends_script_and_env(fake_bin, job: BatchJob, tmp_path: Path) -> None:
    fake_bin("sbatch", f'cat > {tmp_path}/script; echo "$ZEUS_X" > {tmp_path}/env; echo "1234;cluster"\n')
    assert submit(job, SlurmSettings()) == "1234"
    assert (tmp_path / "script").read_text() == job.script
    assert (tmp_path / "env").read_text() == "1\n"


def test_submit_refusal_names_the_setting(fake_bin, job: BatchJob) -> None:
    fake_bin(
        "sbatch",
        'echo "sbatch: error: Batch job submission failed: Invalid partition name specified" >&2; exit 1\n',
    )
    with pytest.raises(SlurmSubmitError, match=r"executor\.partition.*sinfo -s") as err:
        submit(job, SlurmSettings(partition="nope"))
    assert err.value.exit_code == 2
    assert not err.value.transient


def test_submit_to_an_unreachable_controller_is_transient(fake_bin, job: BatchJob) -> None:
    fake_bin(
        "sbatch", 'echo "sbatch: error: Batch job submission failed: Unable to contact slurm controller" >&2\nexit 1\n'
    )
    with pytest.raises(SlurmError) as err:
        submit(job, SlurmSettings())
    assert err.value.transient
    assert not isinstance(err.value, SlurmSubmitError)


def test_submit_refuses_output_that_is_not_a_job_id(fake_bin, job: BatchJob) -> None:
    fake_bin("sbatch", 'echo "Submitted batch job 12"\n')
    with pytest.raises(SlurmError, match="instead of a job id"):
        submit(job, SlurmSettings())


def test_missing_slurm_commands_are_a_usage_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, job) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(SlurmNotFoundError, match="not installed") as err:
        submit(job, SlurmSettings())
    assert err.value.exit_code == 2


def test_a_command_that_hangs_is_a_transient_error(fake_bin) -> None:
    fake_bin("squeue", "sleep 5\n")
    with pytest.raises(SlurmError, match="did not answer") as err:
        query(["1"], timeout=0.5)
    assert err.value.transient


def test_query_of_jobs_slurm_forgot_is_empty(fake_bin) -> None:
    fake_bin("squeue", 'echo "slurm_load_jobs error: Invalid job id specified" >&2; exit 1\n')
    assert query(["7", "8"]) == {}


def test_query_asks_for_all_states_of_the_ids_and_keeps_only_them(fake_bin) -> None:
    log = fake_bin("squeue", f"printf '%s' '{SQUEUE_OUT}'\n")
    assert set(query(["43", "41", "43"])) == {"41", "43"}
    call = log.read_text()
    assert "--states=all" in call and "--jobs=41,43 " in call


def test_find_jobs_by_names_and_prefix(fake_bin) -> None:
    log = fake_bin("squeue", f"printf '%s' '{SQUEUE_OUT}'\n")
    assert [j.job_id for j in find_jobs(prefix="zeus-a-")] == ["41"]
    found = find_jobs(names=["t", "c"])
    assert [j.job_id for j in found] == ["41", "42", "43", "44"]  # the fake ignores --name; squeue filters
    assert log.read_text().splitlines()[-1].endswith(" --name=c,t")
    assert "--user=" in log.read_text()
    with pytest.raises(ValueError, match="comma"):
        find_jobs(names=["a,b"])


def test_cancel_and_signal_arguments(fake_bin) -> None:
    log = fake_bin("scancel", "exit 0\n")
    cancel(["12", "3"])
    cancel(["12"], signal="TERM", batch_only=True)
    cancel(["12"], signal="USR1")
    cancel([])
    assert log.read_text().splitlines() == [
        "scancel 3 12",
        "scancel --signal=TERM --batch 12",
        "scancel --signal=USR1 --full 12",
    ]
    with pytest.raises(ValueError, match="needs a signal"):
        cancel(["12"], batch_only=True)
