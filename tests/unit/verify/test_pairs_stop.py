"""The pairwise test's server stop, run for real in a local shell (issue 15).

A stand-in ``ib_write_bw`` (a shell script that sleeps: the vendor binary is below the line the
lab emulates) is put on PATH; the server and stop commands are the exact strings the pair phase
sends over ssh. Nothing is killed by a value someone else could have written.
"""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import time

import pytest

from fabricops.verify import pairs

OPTS = {"bw_size": 65536, "bw_qps": 1, "lat_size": 2, "timeout_s": 30, "connect_retries": 1}


@pytest.fixture
def shell(tmp_path, monkeypatch):
    bindir = tmp_path / "bin"
    bindir.mkdir()
    fake = bindir / "ib_write_bw"
    fake.write_text("#!/bin/sh\nexec sleep 30\n")
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setattr(pairs, "RUN_DIR_PARENT", str(tmp_path))
    env = dict(os.environ, PATH=f"{bindir}:{os.environ['PATH']}")

    def start(cmd: str) -> subprocess.Popen:
        return subprocess.Popen(
            ["sh", "-c", cmd], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True
        )

    def run(cmd: str) -> subprocess.CompletedProcess:
        return subprocess.run(["sh", "-c", cmd], env=env, capture_output=True, text=True, timeout=20)

    return tmp_path, start, run


def _wait_for(path, timeout=10.0):
    deadline = time.monotonic() + timeout
    while not path.exists() or not path.read_text().strip():
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.05)


def test_server_runs_in_a_private_directory_and_stop_kills_only_it(shell):
    tmp, start, run = shell
    token = pairs.new_token()
    proc = start(pairs.server_command("ib_write_bw", "mlx5_0/1", 18515, OPTS, token=token))
    run_dir = tmp / f"fabricops-verify.{token}"
    _wait_for(run_dir / "server.pid")
    assert stat.S_IMODE(run_dir.stat().st_mode) == 0o700
    assert stat.S_IMODE((run_dir / "server.pid").stat().st_mode) & 0o077 == 0
    out = run(pairs.stop_server_command("ib_write_bw", "mlx5_0/1", 18515, OPTS, token=token))
    assert out.returncode == 0
    assert proc.wait(timeout=10) != 0  # the server was stopped, not left to run out its timeout
    assert not run_dir.exists()  # the run cleans up after itself


def test_a_planted_directory_makes_the_server_refuse_to_start(shell):
    tmp, start, _run = shell
    token = pairs.new_token()
    (tmp / f"fabricops-verify.{token}").mkdir()
    proc = start(pairs.server_command("ib_write_bw", "mlx5_0/1", 18515, OPTS, token=token))
    assert proc.wait(timeout=10) == 4


@pytest.mark.parametrize("content", ["-1", "1", "0", "$(touch pwned)", "12 13", ""])
def test_a_pid_file_that_is_not_a_server_pid_kills_nothing(shell, content):
    tmp, _start, run = shell
    victim = subprocess.Popen(["sleep", "30"])
    try:
        token = pairs.new_token()
        d = tmp / f"fabricops-verify.{token}"
        d.mkdir(mode=0o700)
        (d / "server.pid").write_text((content or str(victim.pid)) + "\n")
        out = run(pairs.stop_server_command("ib_write_bw", "mlx5_0/1", 18515, OPTS, token=token))
        assert out.returncode == 0
        time.sleep(0.2)
        assert victim.poll() is None, "an unrelated process was signalled"
        assert not (tmp / "pwned").exists()
    finally:
        victim.kill()
        victim.wait()


def test_the_pid_of_another_perftest_server_is_not_killed(shell):
    """Another run's server (other port) has a real timeout+perftest command line: still not ours."""
    tmp, start, run = shell
    other_token, token = pairs.new_token(), pairs.new_token()
    other = start(pairs.server_command("ib_write_bw", "mlx5_1/1", 18516, OPTS, token=other_token))
    try:
        _wait_for(tmp / f"fabricops-verify.{other_token}" / "server.pid")
        pid = (tmp / f"fabricops-verify.{other_token}" / "server.pid").read_text()
        d = tmp / f"fabricops-verify.{token}"
        d.mkdir(mode=0o700)
        (d / "server.pid").write_text(pid)
        run(pairs.stop_server_command("ib_write_bw", "mlx5_0/1", 18515, OPTS, token=token))
        time.sleep(0.2)
        assert other.poll() is None
    finally:
        os.killpg(other.pid, signal.SIGKILL)
        other.wait()


def test_tokens_are_unguessable_and_checked():
    assert pairs.new_token() != pairs.new_token() and len(pairs.new_token()) == 32
    for bad in ("", "x" * 32, "../../etc", "0123"):
        with pytest.raises(ValueError):
            pairs.stop_server_command("ib_write_bw", "mlx5_0/1", 18515, OPTS, token=bad)
    assert "/tmp/fabricops-verify-" not in pairs.server_command("ib_write_bw", "mlx5_0/1", 1, OPTS)


# --- the client stops retrying when the server is already dead (a port that is down) -------------


@pytest.fixture
def refused(tmp_path, monkeypatch):
    """A client ``ib_write_bw`` that counts its attempts and always fails to connect, as perftest
    does when no server listens."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    fake = bindir / "ib_write_bw"
    fake.write_text(
        f'#!/bin/sh\necho x >> {tmp_path}/attempts\necho " Couldn\'t connect to 10.0.0.3:18515"\nexit 1\n'
    )
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setattr(pairs, "RUN_DIR_PARENT", str(tmp_path))
    env = dict(os.environ, PATH=f"{bindir}:{os.environ['PATH']}")
    return tmp_path, env


def test_a_stop_file_ends_the_client_retries_with_its_last_output(refused):
    tmp, env = refused
    token = pairs.new_token()
    opts = dict(OPTS, connect_retries=10_000)  # ~40 minutes of retries if nothing stops them
    cmd = pairs.client_command("ib_write_bw", "mlx5_0/1", 18515, "10.0.0.3", opts, token=token)
    client = subprocess.Popen(["sh", "-c", cmd], env=env, stdout=subprocess.PIPE, text=True)
    try:
        _wait_for(tmp / "attempts")
        client_dir = tmp / f"fabricops-verify-client.{token}"
        assert stat.S_IMODE(client_dir.stat().st_mode) == 0o700
        subprocess.run(["sh", "-c", pairs.stop_client_command(token)], check=True, timeout=20)
        out, _ = client.communicate(timeout=10)
    finally:
        client.kill()
    assert client.returncode == 1 and "Couldn't connect" in out  # the diagnosis sees the same output
    assert len((tmp / "attempts").read_text().split()) < 100
    assert not client_dir.exists()  # the client cleans up after itself


def test_a_stop_sent_before_the_client_started_still_ends_it_after_one_attempt(refused):
    """The server failed within server_start_s (its port is down) and the engine stopped the client
    before the client had made its directory: the stop waits for it, the client tries once (its
    output is still perftest's) and cleans up."""
    tmp, env = refused
    token = pairs.new_token()
    subprocess.run(["sh", "-c", pairs.stop_client_command(token)], check=True, timeout=20)
    client_dir = tmp / f"fabricops-verify-client.{token}"
    assert stat.S_IMODE(client_dir.stat().st_mode) == 0o700 and (client_dir / "stop").exists()
    cmd = pairs.client_command("ib_write_bw", "mlx5_0/1", 18515, "10.0.0.3",
                               dict(OPTS, connect_retries=10_000), token=token)
    out = subprocess.run(["sh", "-c", cmd], env=env, capture_output=True, text=True, timeout=30)
    assert out.returncode == 1 and "Couldn't connect" in out.stdout
    assert len((tmp / "attempts").read_text().split()) == 1
    assert not client_dir.exists()


def test_a_planted_client_directory_is_not_written_through(refused):
    """Someone else's directory (or a symlink) under the client's name: the stop writes nothing
    there, and the client still ends by its retry count."""
    tmp, env = refused
    token = pairs.new_token()
    target = tmp / "elsewhere"
    target.mkdir()
    (tmp / f"fabricops-verify-client.{token}").symlink_to(target)
    subprocess.run(["sh", "-c", pairs.stop_client_command(token)], check=True, timeout=20)
    assert not (target / "stop").exists()
    cmd = pairs.client_command(
        "ib_write_bw", "mlx5_0/1", 18515, "10.0.0.3", dict(OPTS, connect_retries=3), token=token
    )
    out = subprocess.run(["sh", "-c", cmd], env=env, capture_output=True, text=True, timeout=30)
    assert out.returncode == 1 and len((tmp / "attempts").read_text().split()) == 3
    assert not (target / "stop").exists()
