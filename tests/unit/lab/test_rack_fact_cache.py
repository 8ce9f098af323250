"""A fresh lab forgets the controller's cached facts of its host names (gathering = smart).

Found when test_verify ran alone after an earlier lab of the same names: site.yml's first converge
took the old hosts' cached facts for the new ones, and the second converge changed 2 tasks per host
(the idempotence check failed). Ansible reads the cache as ansible.cfg says; so does the lab.
"""

from __future__ import annotations

from fabricops_lab import rack


def _project(tmp_path, monkeypatch, cache_lines: str):
    (tmp_path / "ansible.cfg").write_text(f"[defaults]\n{cache_lines}\n")
    monkeypatch.setenv("ANSIBLE_CONFIG", str(tmp_path / "ansible.cfg"))
    monkeypatch.chdir(tmp_path)


def test_only_the_lab_names_cached_facts_go(tmp_path, monkeypatch):
    _project(tmp_path, monkeypatch, "fact_caching = jsonfile\nfact_caching_connection = .cache/facts")
    cache = tmp_path / ".cache" / "facts"
    cache.mkdir(parents=True)
    for name in ("s1_gpu01", "gpu02", "s1_leaf-onyx", "s1_gpu010", "s1_login01", "notes"):
        (cache / name).write_text("{}")
    gone = rack.forget_cached_facts(["gpu01", "gpu02", "leaf-onyx"])
    assert sorted(p.name for p in gone) == ["gpu02", "s1_gpu01", "s1_leaf-onyx"]
    assert sorted(p.name for p in cache.iterdir()) == ["notes", "s1_gpu010", "s1_login01"]


def test_a_memory_cache_or_none_at_all_is_left_alone(tmp_path, monkeypatch):
    _project(tmp_path, monkeypatch, "fact_caching = memory")
    assert rack.fact_cache_dir() is None
    assert rack.forget_cached_facts(["gpu01"]) == []
    _project(tmp_path, monkeypatch, "fact_caching = jsonfile\nfact_caching_connection = missing")
    assert rack.forget_cached_facts(["gpu01"]) == []  # no such directory: nothing to do


def test_a_symlink_in_the_cache_is_not_followed(tmp_path, monkeypatch):
    _project(tmp_path, monkeypatch, "fact_caching = jsonfile\nfact_caching_connection = facts")
    (tmp_path / "facts").mkdir()
    target = tmp_path / "precious"
    target.write_text("keep")
    (tmp_path / "facts" / "s1_gpu01").symlink_to(target)
    assert rack.forget_cached_facts(["gpu01"]) == []
    assert target.read_text() == "keep"
