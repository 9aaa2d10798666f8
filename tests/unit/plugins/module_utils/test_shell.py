"""Dedupe and shell quoting (SCHEMA.md 6.6)."""

from __future__ import annotations

import pytest

from vllm_fleet.shell import dedupe, quote, shell_command, units, vllm_shell


# -- units ------------------------------------------------------------------------

def test_units_flag_takes_next_non_dash_token_as_value():
    assert units(["--a", "1", "--b", "--c", "x", "pos"]) == [
        ("--a", "1"), ("--b",), ("--c", "x"), ("pos",)]


def test_units_minus_one_is_its_own_flag_not_a_value():
    # "-1" starts with "-": it is not --temp's value but a flag unit of its own
    assert units(["--temp", "-1"]) == [("--temp",), ("-1",)]
    # ... which in turn takes a following non-dash token as its value
    assert units(["--temp", "-1", "x"]) == [("--temp",), ("-1", "x")]


# -- dedupe (last wins) ------------------------------------------------------------

def test_dedupe_last_wins_and_moves_to_last_position():
    assert dedupe(["--x", "1", "--y", "2", "--x", "3", "--z"]) == ["--y", "2", "--x", "3", "--z"]


def test_dedupe_replaces_flag_with_value_by_bare_flag_and_back():
    assert dedupe(["--x", "1", "--x"]) == ["--x"]
    assert dedupe(["--x", "--y", "--x", "5"]) == ["--y", "--x", "5"]


def test_dedupe_flag_identity_is_the_exact_string():
    tokens = ["--x=1", "--x", "2", "-tp", "2", "--tensor-parallel-size", "4", "--no-foo", "--foo",
              "--x=1"]
    # --x=1 repeats (kept once, at its last place); --x, -tp, --tensor-parallel-size,
    # --no-foo and --foo are five more distinct flags
    assert dedupe(tokens) == ["--x", "2", "-tp", "2", "--tensor-parallel-size", "4", "--no-foo",
                              "--foo", "--x=1"]


def test_dedupe_minus_one_value_becomes_its_own_flag():
    # ("--n",), ("-1",), ("--n", "5"): the first --n is dropped, "-1" survives as a flag
    assert dedupe(["--n", "-1", "--n", "5"]) == ["-1", "--n", "5"]
    assert dedupe(["-1", "--a", "-1"]) == ["--a", "-1"]


def test_dedupe_keeps_every_positional_unit_in_order():
    assert dedupe(["pos", "--f", "1", "pos", "--f", "2", "other"]) == [
        "pos", "pos", "--f", "2", "other"]


def test_dedupe_drops_empty_tokens_before_grouping():
    # without the empty string, "x" becomes the value of --a
    assert dedupe(["--a", "", "x", "--a", "y"]) == ["--a", "y"]
    assert dedupe(["", "--b", ""]) == ["--b"]


def test_dedupe_keeps_first_unit_when_no_repeats():
    args = ["--kv-transfer-config", '{"a":1}', "--enable-expert-parallel", "--port", "8001"]
    assert dedupe(args) == args


# -- quoting -----------------------------------------------------------------------

@pytest.mark.parametrize("value", [
    "8", "deepseek_r1", "a/b.c", "k=v", "host:1", "a@b", "x,y", "1+2", "50%", "-1", "$HEAD_IP",
    "$IFACE_NAME", "$VLLM_INSTANCE_2",
])
def test_quote_leaves_safe_values_bare(value):
    assert quote(value) == value


@pytest.mark.parametrize("value, expected", [
    ('{"method":"mtp"}', '\'{"method":"mtp"}\''),
    ("a b", "'a b'"),
    ("it's", "'it'\\''s'"),
    ("$HEAD_IP:8000", "'$HEAD_IP:8000'"),          # not a LONE variable
    ("http://$PREFILL_NODE_1:8001", "'http://$PREFILL_NODE_1:8001'"),
    ("$lower", "'$lower'"),                        # lower case is not a placeholder
    ("", "''"),
])
def test_quote_wraps_everything_else_in_single_quotes(value, expected):
    assert quote(value) == expected


def test_vllm_shell_one_unit_per_line_flag_shares_value_line():
    argv = ["vllm", "serve", "org/m", "--tensor-parallel-size", "8", "--enable-expert-parallel",
            "--speculative-config", '{"method":"mtp"}', "--master-addr", "$HEAD_IP"]
    assert vllm_shell(argv) == (
        "vllm serve org/m \\\n"
        "  --tensor-parallel-size 8 \\\n"
        "  --enable-expert-parallel \\\n"
        "  --speculative-config '{\"method\":\"mtp\"}' \\\n"
        "  --master-addr $HEAD_IP")


def test_shell_command_never_quotes_flags_or_positionals():
    assert shell_command("vllm serve m", ["some thing", "--x=a b", "--y"]) == (
        "vllm serve m \\\n  some thing \\\n  --x=a b \\\n  --y")


def test_shell_command_unquoted_template_form():
    # routers are printed with 4-space indent and raw values
    assert shell_command("vllm-router --policy rr", ["--prefill", "http://$P_1:8001"],
                         indent="    ", quoted=False) == (
        "vllm-router --policy rr \\\n    --prefill http://$P_1:8001")


def test_vllm_shell_no_args():
    assert vllm_shell(["vllm", "serve", "org/m"]) == "vllm serve org/m"
