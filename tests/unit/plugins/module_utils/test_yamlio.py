"""YAML 1.2 core-schema loading (SCHEMA.md 1): PyYAML with js-yaml 4's implicit typing."""

from __future__ import annotations

import datetime
import math

import pytest

from vllm_fleet.yamlio import load_yaml, yaml11_traps


@pytest.mark.parametrize("text, value", [
    ("yes", "yes"), ("no", "no"), ("on", "on"), ("off", "off"), ("y", "y"), ("No", "No"),  # 1.1 booleans
    ("true", True), ("False", False), ("TRUE", True),
    ("~", None), ("null", None), ("", None),
    ("0777", 777),              # 1.1: octal 511
    ("0o17", 15), ("0x1F", 31), ("-12", -12),
    ("1:30", "1:30"),           # 1.1: base-60 90
    ("1_000", "1_000"),         # 1.1: 1000
    ("1e3", 1000.0), ("-.5", -0.5),
    ("2026-01-02", datetime.date(2026, 1, 2)),
])
def test_plain_scalar_typing(text, value):
    got = load_yaml(f"k: {text}\n")["k"]
    assert got == value and type(got) is type(value)


def test_special_floats():
    data = load_yaml("a: .inf\nb: -.Inf\nc: .nan\n")
    assert data["a"] == math.inf and data["b"] == -math.inf and math.isnan(data["c"])


def test_quoted_scalars_stay_strings():
    assert load_yaml("a: 'yes'\nb: \"0\"\nc: '2026-01-02'\n") == {"a": "yes", "b": "0", "c": "2026-01-02"}


def test_key_order_is_kept():
    assert list(load_yaml("z: 1\na: 2\nm: 3\n")) == ["z", "a", "m"]


def test_timestamp_with_time_is_a_datetime():
    got = load_yaml("t: 2026-01-02T10:00:00Z\n")["t"]
    assert got == datetime.datetime(2026, 1, 2, 10, 0, tzinfo=datetime.timezone.utc)


def test_yaml11_traps_lists_scalars_read_differently():
    text = "a: yes\nb: \"yes\"\nc: 0777\nd: 1:30\ne: on\nf: 12\ng: [off, x]\n"
    assert yaml11_traps(text) == [
        (1, "yes", "yes", True), (3, "0777", 777, 511), (4, "1:30", "1:30", 90), (5, "on", "on", True),
        (7, "off", "off", False)]
