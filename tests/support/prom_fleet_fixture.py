"""The recorded Prometheus answers of tests/fixtures/prometheus_fleet (Prometheus 2.42 scraping
``infertop sim --shared-port``): ``fixture(name)``, when they were recorded (``RECORDED_AT``) and the
engines they name (``LIVE`` scraped then, ``GONE`` a stopped sim whose rates are still in the window)."""

from __future__ import annotations

import json

from locations import FIXTURES


FIX = FIXTURES / "prometheus_fleet"


META = json.loads((FIX / "README.json").read_text())


RECORDED_AT = META["recorded_at"]


LIVE = [f"127.0.0.1:36041/engine/{i}" for i in range(5)]  # the sim being scraped


GONE = [f"127.0.0.1:39121/engine/{i}" for i in range(5)]  # a stopped sim: rates still in the window


def fixture(name: str) -> dict:
    return json.loads((FIX / f"{name}.json").read_text())
