"""Installed as a user installs it: a wheel and a collection tarball, a fresh venv, a fresh
collections path, an empty directory outside the checkout.

Builds ``fabricops-<v>-py3-none-any.whl`` and ``fabricops-fabric-<v>.tar.gz`` from this checkout,
installs the wheel (runtime dependencies only, from the package index) into a new venv and the
collection with ``ansible-galaxy collection install``, then from an empty directory: ansible-doc for
every module, role and filter; ``ansible-playbook fabricops.fabric.site`` on one lab host; and
``fabricops drift``, whose report must equal the one the checkout produces.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tarfile
import zipfile

import pytest
from integration.conftest import INVENTORY, REPO, VENV_BIN, _recap, ansible_env
from integration.readme import readme_blocks

pytestmark = pytest.mark.lab

HOST = "gpu04"
EXTRA = ["-e", "nccl_profile_name=ib"]


def _run(argv, cwd, env, timeout=900):
    env = {**env, "PWD": str(cwd)}  # as the user's shell sets it after `cd` (verify.yml's report dir)
    proc = subprocess.run([str(a) for a in argv], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout)
    return proc


def _ok(proc):
    assert proc.returncode == 0, f"{proc.args}: rc {proc.returncode}\n{(proc.stdout + proc.stderr)[-3000:]}"
    return proc


@pytest.fixture(scope="module")
def user(tmp_path_factory, lab):
    """(env, workdir, venv bin) of a controller installed by the README's own commands: its build
    block at the top of this checkout and its controller block in a directory holding the two built
    files, both verbatim through bash, in a fresh home directory (the venv ~/fabricops, the collection
    in ~/.ansible/collections). The checkout must come out untouched."""
    root = tmp_path_factory.mktemp("user")
    home, tmp, work = root / "home", root / "tmp", root / "work"
    for d in (home, tmp, work):
        d.mkdir()
    build, install = readme_blocks("Install on your controller")[:2]
    clean = {k: v for k, v in os.environ.items()
             if not k.startswith(("ANSIBLE_", "FABRICOPS_", "VIRTUAL_ENV", "PYTHON"))}
    clean["PATH"] = os.pathsep.join(p for p in clean.get("PATH", "").split(os.pathsep)
                                    if p and p != str(VENV_BIN))
    readme_env = {**clean, "HOME": str(home), "TMPDIR": str(tmp)}
    before = _build_outputs()
    _ok(_run(["bash", "-euo", "pipefail", "-c", build], REPO, readme_env))
    assert _build_outputs() == before, "the README's build wrote into the checkout"
    (dist,) = tmp.glob("*/dist")
    for f in dist.iterdir():
        shutil.copy(f, root)
    _ok(_run(["bash", "-euo", "pipefail", "-c", install], root, readme_env, timeout=900))
    venv = home / "fabricops"
    colls = home / ".ansible" / "collections"
    assert (colls / "ansible_collections" / "fabricops" / "fabric" / "MANIFEST.json").is_file()
    env = dict(clean)  # the operator's own home (SSH keys and known hosts of the lab)
    env["PATH"] = os.pathsep.join([str(venv / "bin"), env["PATH"]])
    env["ANSIBLE_NOCOLOR"] = "1"
    # the example settings the README tells a user to copy, with the collection where the README put it
    cfg = (colls / "ansible_collections/fabricops/fabric/inventories/example/ansible.cfg").read_text()
    cfg = cfg.replace("[defaults]\n", f"[defaults]\ncollections_path = {colls}\n", 1)
    # this run's own fact cache: the operator's ~/.cache holds facts of an earlier lab's hosts
    cfg = cfg.replace("fact_caching_connection = ~/.cache/fabricops/facts",
                      f"fact_caching_connection = {root / 'facts'}")
    assert str(root / "facts") in cfg
    (work / "ansible.cfg").write_text(cfg)
    return {"env": env, "work": work, "bin": venv / "bin", "colls": colls, "root": root}


def _build_outputs() -> set[str]:
    """What a build in the checkout would leave there: setuptools' build/ and *.egg-info, the wheel
    and the collection tarball (other test streams write elsewhere in the checkout meanwhile)."""
    found = {"build", "dist"} & {p.name for p in REPO.iterdir()}
    for pattern in ("*.egg-info", "src/*.egg-info", "*.whl", "fabricops-fabric-*.tar.gz"):
        found |= {str(p.relative_to(REPO)) for p in REPO.glob(pattern)}
    return found


def test_the_readme_build_block_builds_from_a_copy_in_order():
    """The README's build block makes its ansible-galaxy before it uses it, and works on a copy."""
    build = readme_blocks("Install on your controller")[0]
    lines = [ln for ln in build.splitlines() if ln.strip()]
    assert "git archive" in lines[0] and 'cd "$src"' in lines[0]
    first_use = next(i for i, ln in enumerate(lines) if "ansible-galaxy" in ln)
    assert any("ansible-core" in ln for ln in lines[:first_use])


def test_the_installed_package_runs_from_its_own_venv_without_the_checkout(user):
    code = "import fabricops, sys; print(fabricops.__file__); print(sys.prefix)"
    out = _ok(_run(["python", "-c", code], user["work"], user["env"])).stdout
    assert str(REPO) not in out.splitlines()[0]
    # a production controller installs no lab packages: the emulated switches' SSH server is the lab's
    lab_dep = _run(["python", "-c", "import asyncssh"], user["work"], user["env"])
    assert lab_dep.returncode != 0


def test_the_runtime_wheel_and_collection_carry_no_lab_and_the_cli_offers_none(user):
    """The emulated rack is its own distribution (lab/pyproject.toml): none of it in the wheel or the
    collection tarball, not importable on the controller, and no `lab` in `fabricops --help`."""
    (wheel,) = user["root"].glob("fabricops-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert any(n.startswith("fabricops/verify/") for n in names)
    assert [n for n in names if n.startswith(("fabricops_lab", "fabricops/lab/"))] == []
    (tarball,) = user["root"].glob("fabricops-fabric-*.tar.gz")
    with tarfile.open(tarball) as tar:
        members = tar.getnames()
    assert "roles" in members and [n for n in members if n == "lab" or n.startswith("lab/")] == []
    assert _run(["python", "-c", "import fabricops_lab"], user["work"], user["env"]).returncode != 0
    helptext = _ok(_run(["fabricops", "--help"], user["work"], user["env"])).stdout
    commands = re.findall(r"^    (\w+) ", helptext, re.M)
    assert "verify" in commands and "lab" not in commands, helptext
    lab = _run(["fabricops", "lab", "status"], user["work"], user["env"])
    assert lab.returncode == 2 and "invalid choice: 'lab'" in lab.stderr


def test_ansible_builder_introspect_lists_the_collections_python_requirements(user):
    builder = VENV_BIN / "ansible-builder"
    if not builder.exists():
        pytest.fail("ansible-builder is a dev dependency and must be installed")
    out = _ok(_run([builder, "introspect", user["colls"]], REPO, os.environ)).stdout
    # (ansible-builder leaves out what ansible-core itself brings, pyyaml among them)
    for req in ("ansible-runner", "netmiko", "pytest-testinfra", "jinja2"):
        line = rf"^- '?{re.escape(req)}\b.*# from collection fabricops.fabric"
        assert re.search(line, out, re.M | re.I), out


def _listed(kind: str, user) -> set[str]:
    out = _ok(_run(["ansible-doc", "-t", kind, "-l", "fabricops.fabric", "--json"], user["work"],
                   user["env"])).stdout
    return set(json.loads(out))


def test_ansible_doc_documents_every_module_role_and_filter(user):
    modules = {f"fabricops.fabric.{p.stem}" for p in (REPO / "plugins/modules").glob("*.py")
               if not p.name.startswith("_")}
    roles = {f"fabricops.fabric.{p.name}" for p in (REPO / "roles").iterdir() if (p / "meta").is_dir()}
    assert _listed("module", user) == modules
    assert _listed("role", user) == roles
    filters = _listed("filter", user)
    assert len(filters) >= 10
    for kind, names in (("module", modules), ("role", roles), ("filter", filters)):
        proc = _ok(_run(["ansible-doc", "-t", kind, "--json", *sorted(names)], user["work"], user["env"]))
        docs = json.loads(proc.stdout)
        assert set(docs) == set(names), kind
        for name, doc in docs.items():
            assert doc.get("doc", {}).get("description") or doc.get("entry_points"), (kind, name)


def _site(user_or_none, *more):
    argv = ["ansible-playbook", "-i", INVENTORY, "fabricops.fabric.site", "--limit", HOST, "--tags", "hosts",
            *EXTRA, *more]
    if user_or_none is None:
        argv[0] = VENV_BIN / "ansible-playbook"
        argv[3] = "site.yml"
        return _run(argv, REPO, ansible_env())
    return _run(argv, user_or_none["work"], user_or_none["env"])


def test_site_from_the_installed_collection_converges_as_from_the_checkout(user):
    first = _ok(_site(user))
    assert _recap(first.stdout)[HOST]["failures"] == 0
    again = _ok(_site(user))
    assert _recap(again.stdout)[HOST]["changed"] == 0, again.stdout[-3000:]
    assert f"ROLLOUT DONE: {HOST}; failed: none" in again.stdout
    checkout = _ok(_site(None))
    assert _recap(checkout.stdout)[HOST]["changed"] == 0, checkout.stdout[-3000:]


def test_drift_from_an_empty_directory_reports_what_the_checkout_reports(user, tmp_path):
    _ok(_site(user))  # converged (idempotent; the test does not rely on the one before)
    installed, checkout = tmp_path / "installed.json", tmp_path / "checkout.json"
    args = ["drift", "-i", INVENTORY, "--limit", HOST, *EXTRA]
    _ok(_run(["fabricops", *args, "--json", installed], user["work"], user["env"]))
    _ok(_run([VENV_BIN / "fabricops", *args, "--json", checkout], REPO, ansible_env()))
    a, b = json.loads(installed.read_text()), json.loads(checkout.read_text())
    assert a["hosts"] == b["hosts"] == [HOST]
    assert a["items"] == b["items"] == []


def test_site_check_mode_from_an_empty_directory_completes_with_its_report(user, tmp_path):
    """Issue 35: the verification play's report directory was not made in check mode, so `--check`
    from a fresh directory failed on its last play (the checkout hid it: its .cache/ exists)."""
    # converged, IPoIB up included (consent: the test does not rely on the ones before)
    _ok(_site(user, "-e", "ipoib_allow_restart=true", "-e", "mlnx_ofed_allow_restart=true"))
    work = tmp_path / "fresh"  # the user's settings (collections path), no .cache/ from earlier runs
    work.mkdir()
    shutil.copy(user["work"] / "ansible.cfg", work / "ansible.cfg")
    argv = ["ansible-playbook", "-i", INVENTORY, "fabricops.fabric.site", "--check", "--diff",
            "--limit", f"{HOST},localhost", "--tags", "hosts,verify", *EXTRA,
            "-e", f"fabricops_verify_limit={HOST}", "-e", "fabricops_verify_only=hosts"]
    run = _ok(_run(argv, work, user["env"]))
    recap = _recap(run.stdout)
    assert recap[HOST]["changed"] == 0 and recap["localhost"]["failures"] == 0, run.stdout[-3000:]
    # the report lands in the directory the play ran in, not in the checkout the inventory is from
    report = json.loads((work / ".cache/verify/verify.json").read_text())
    assert report["hosts"] == [HOST] and report["exit_status"] == 0


def test_other_commands_work_from_an_empty_directory(user, tmp_path):
    fixture = next((REPO / "tests/fixtures/ibstat").glob("*"))
    out = _ok(_run(["fabricops", "parse", "ibstat", fixture], user["work"], user["env"])).stdout
    assert json.loads(out)
    _ok(_run(["fabricops", "plan", "--gpus", "32"], user["work"], user["env"]))
    # verify and diagnose read the inventory they are given and judge a real host (0 pass / 1 failed;
    # anything else means they could not run from here)
    verify = _run(["fabricops", "verify", "-i", INVENTORY, "--limit", HOST, "--only", "gpus", "--json", "-"],
                  user["work"], user["env"])
    assert verify.returncode in (0, 1), verify.stdout[-2000:] + verify.stderr[-2000:]
    assert json.loads(verify.stdout)
    argv = ["fabricops", "diagnose", "-i", INVENTORY, "--limit", HOST, "--no-switches", "--json", "-"]
    diagnose = _run(argv, user["work"], user["env"])
    assert diagnose.returncode in (0, 1), diagnose.stdout[-2000:] + diagnose.stderr[-2000:]
    assert json.loads(diagnose.stdout)
