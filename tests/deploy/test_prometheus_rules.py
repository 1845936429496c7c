"""promtool on the Prometheus configuration and alert rules deploy/ ships."""

import subprocess

import pytest

from tests.support.prometheus import INSTALL_HINT, binary
from tests.support.workers import ROOT

PROMETHEUS_DIR = ROOT / "deploy" / "prometheus"
PROMTOOL = binary("promtool")
pytestmark = pytest.mark.skipif(PROMTOOL is None, reason=f"no promtool binary on PATH: {INSTALL_HINT}")


def _promtool(*args: str) -> str:
    run = subprocess.run([PROMTOOL, *args], cwd=PROMETHEUS_DIR, capture_output=True, text=True, timeout=60)
    output = run.stdout + run.stderr
    assert run.returncode == 0, f"promtool {' '.join(args)} failed ({run.returncode}):\n{output}"
    return output


def test_promtool_check_config():
    output = _promtool("check", "config", "prometheus.yml")
    assert "SUCCESS" in output and "1 rule files found" in output  # alerts.yml is loaded and checked too


def test_promtool_check_rules():
    output = _promtool("check", "rules", "alerts.yml")
    assert "SUCCESS" in output


def test_promtool_alert_unit_tests():
    """alerts.test.yml: each alert fires on the series it is meant for (and not on others)."""
    output = _promtool("test", "rules", "alerts.test.yml")
    assert "SUCCESS" in output
