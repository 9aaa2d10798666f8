"""tests/testbed/hub_mirror.py's simulated link (--rate-mib): each chunk waits for its slot on
one link shared by every request; unlimited sends at once. Time is the test's, not the clock's."""

from __future__ import annotations

import io
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "tests" / "testbed"))

import hub_mirror  # noqa: E402


class Clock:
    def __init__(self):
        self.now, self.slept = 100.0, []

    def monotonic(self):
        return self.now

    def sleep(self, seconds):
        self.slept.append(round(seconds, 6))
        self.now += seconds


def test_a_limited_link_spaces_the_chunks_by_their_size(monkeypatch):
    clock = Clock()
    monkeypatch.setattr(hub_mirror, "time", clock)
    link, out = hub_mirror.Link(rate=1000), io.BytesIO()
    for _ in range(3):
        link.send(out, b"x" * 500)          # half a second of link each
    assert out.getvalue() == b"x" * 1500
    assert clock.slept == [0.0, 0.5, 0.5]
    clock.now += 5                          # an idle link: the next chunk goes at once
    link.send(out, b"y" * 10)
    assert clock.slept[-1] == 0.0


def test_two_requests_share_one_link(monkeypatch):
    clock = Clock()
    monkeypatch.setattr(hub_mirror, "time", clock)
    link = hub_mirror.Link(rate=100)
    link.send(io.BytesIO(), b"a" * 100)     # request A: sent at once, the link busy for 1 s
    link.send(io.BytesIO(), b"b" * 50)      # request B, at the same moment: waits for it
    assert clock.slept == [0.0, 1.0] and link.free_at == 101.5


def test_an_unlimited_link_never_waits(monkeypatch):
    clock = Clock()
    monkeypatch.setattr(hub_mirror, "time", clock)
    link, out = hub_mirror.Link(), io.BytesIO()
    link.send(out, b"z" * (1 << 20))
    assert clock.slept == [] and len(out.getvalue()) == 1 << 20
