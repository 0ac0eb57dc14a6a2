"""The spool of requests to a running run (storage/spool.py): whole requests in name order,
answers, and requests of another user set aside, never handed on."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from slaq_mpi.storage import spool


def test_requests_come_in_order_and_are_answered(tmp_path: Path) -> None:
    spool.make_spool(tmp_path)
    assert stat.S_IMODE(spool.spool_dir(tmp_path).stat().st_mode) == 0o700
    first = spool.submit(tmp_path, "add", [{"name": "x"}])
    second = spool.submit(tmp_path, "cancel", ["y"])
    got = spool.requests(tmp_path)
    assert [(r.kind, r.body, r.name) for r in got if isinstance(r, spool.Request)] == [
        ("add", [{"name": "x"}], first), ("cancel", ["y"], second)]
    req = got[0]
    assert isinstance(req, spool.Request)
    spool.answer(req.path, True, jobs=["x"])
    assert spool.read_answer(tmp_path, first) == {"accepted": True, "reason": "", "jobs": ["x"]}
    assert not req.path.exists() and spool.read_answer(tmp_path, second) is None


def test_a_request_owned_by_another_user_is_set_aside_not_handed_on(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    spool.make_spool(tmp_path)
    name = spool.submit(tmp_path, "add", [{"name": "x", "algorithm": "/tmp/evil.py:Evil"}])
    path = spool.spool_dir(tmp_path) / f"{name}.request.json"
    owner = path.stat().st_uid
    monkeypatch.setattr(spool.os, "getuid", lambda: owner + 1)  # the run's user is someone else
    got = spool.requests(tmp_path)
    assert len(got) == 1 and not isinstance(got[0], spool.Request)
    assert f"owned by uid {owner}" in got[0][1]
    assert not path.exists() and path.with_name(path.name + ".foreign").exists()


def test_a_file_that_is_not_a_request_is_set_aside(tmp_path: Path) -> None:
    spool.make_spool(tmp_path)
    bad = spool.spool_dir(tmp_path) / "0001-1-add.request.json"
    bad.write_text("{not json")
    got = spool.requests(tmp_path)
    assert len(got) == 1 and not isinstance(got[0], spool.Request) and "not a request" in got[0][1]
    assert bad.with_name(bad.name + ".bad").exists()
