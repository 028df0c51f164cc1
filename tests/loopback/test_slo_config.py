"""The ``slo_classes:`` section: PRODUCT.md's defaults, and every mistake one line naming file, line, field."""

from __future__ import annotations

import pytest

from infertop.config import ConfigError, parse_config

from cli_run import run_cli


def test_defaults_are_product_md_budgets():
    c = parse_config("").slo_classes
    assert list(c.classes) == ["chat", "code", "batch"]
    chat, code, batch = c.classes.values()
    assert (chat.queue_p99_s, chat.ttft_p99_s, chat.tpot_p95_s, chat.e2e_p99_s) == (1.0, 2.0, 0.040, 5.0)
    assert (code.queue_p99_s, code.ttft_p99_s, code.tpot_p95_s, code.e2e_p99_s) == (0.2, 0.5, 0.020, 1.0)
    assert (batch.queue_p99_s, batch.ttft_p99_s, batch.tpot_p95_s, batch.e2e_p99_s) == (30.0, 10.0, 0.100, 60.0)
    assert chat.objective_pct == 99.9 and chat.objective_days == 30 and chat.objective_stage == "e2e"
    assert c.headroom_pct == 30 and c.gpu_hour_price is None


def test_a_section_replaces_the_classes_and_keeps_the_rest():
    c = parse_config("slo_classes:\n  gpu_hour_price: 2.5\n  classes:\n    rag:\n      ttft_p99_s: 1.5\n"
                     "      match: ['*rag*']\n").slo_classes
    assert list(c.classes) == ["rag"] and c.classes["rag"].ttft_p99_s == 1.5 and c.classes["rag"].e2e_p99_s == 5.0
    assert c.gpu_hour_price == 2.5


BAD = [
    ("slo_classes:\n  classes:\n    chat:\n      objective_stage: itl\n", 4, "slo_classes.classes.chat.objective_stage",
     "must be one of queue, ttft, e2e, got 'itl'"),
    ("slo_classes:\n  classes:\n    chat:\n      tpot_p95_s: 0\n", 4, "slo_classes.classes.chat.tpot_p95_s",
     "must be > 0 and <= 60, got 0"),
    ("slo_classes:\n  classes:\n    chat:\n      objective_pct: 100\n", 4, "slo_classes.classes.chat.objective_pct",
     "must be < 100 (a 100 % objective has no error budget)"),
    ("slo_classes:\n  classes:\n    chat:\n      match: ['']\n", 4, "slo_classes.classes.chat.match[0]",
     "an empty pattern matches nothing"),
    ("slo_classes:\n  classes: {}\n", 2, "slo_classes.classes", "must name at least one class"),
    ("slo_classes:\n  headroom: 30\n", 2, "slo_classes.headroom", "unknown key (did you mean 'headroom_pct'?)"),
    ("slo_classes:\n  gpu_hour_price: -1\n", 2, "slo_classes.gpu_hour_price", "must be > 0"),
]


@pytest.mark.parametrize("text, line, fpath, why", BAD)
def test_mistakes_name_file_line_and_field(text, line, fpath, why):
    with pytest.raises(ConfigError) as e:
        parse_config(text, "/etc/infertop.yaml")
    assert str(e.value).startswith(f"/etc/infertop.yaml:{line}: {fpath}: {why}"), str(e.value)


def test_the_command_line_exits_2_with_one_line(tmp_path):
    f = tmp_path / "config.yaml"
    f.write_text(BAD[0][0])
    r = run_cli("snapshot", "--config", str(f), "--window", "0")
    assert r.returncode == 2
    assert r.stderr.strip().splitlines() == [f"infertop: {f}:4: slo_classes.classes.chat.objective_stage: "
                                             "must be one of queue, ttft, e2e, got 'itl'"]
