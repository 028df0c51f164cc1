"""`H` (Edit HPA bounds) through the keyboard while the HPA controller keeps rewriting the HPA's status.

In the demo every try failed with 409 Conflict: the write carried the
resourceVersion read at plan time, and the emulator's HPA sync (every 5 s;
a real cluster's every 15 s) had moved it by the time the operator pressed
``y``. A status-only change must not conflict; a change of the bounds must,
saying what changed, with the re-read diff to confirm again.
"""

from __future__ import annotations

import itertools

from pilot_wait import until
from kube_ui import NS, TOKEN, audit, confirm, connected, make_app, ready, set_input, text

from infertop.ui.screens.confirm import ConfirmScreen
from infertop.ui.screens.kube_dialogs import FormDialog


def _hpa_rv(emu) -> int:
    return int(emu.get("horizontalpodautoscalers", "vllm", NS)["metadata"]["resourceVersion"])


def _syncing(kube_emulator):
    emu = kube_emulator(TOKEN, reconcile_interval=0.2)
    emu.add_deployment(NS, "vllm", replicas=2)
    emu.add_hpa(NS, "vllm", "vllm", min_replicas=1, max_replicas=8)
    emu.wait_until(lambda: ready(emu, "vllm", 2))
    values = itertools.cycle((4.9, 5.0, 5.1))  # within the tolerance of the target (5): status moves, size not
    emu.set_hpa_metrics(lambda ns, name, metric, pods: [next(values) for _ in pods] or None, sync_s=0.1)
    return emu


async def _edit(pilot, app, lo: str, hi: str) -> ConfirmScreen:
    await pilot.press("H")
    form = await until(pilot, lambda: isinstance(app.screen, FormDialog) and app.screen, what="HPA form")
    await set_input(pilot, form, "min", lo)
    await set_input(pilot, form, "max", hi)
    await pilot.press("enter")
    return await confirm(pilot, app, press=False)


async def test_h_twice_while_the_hpa_syncs_its_status(kube_emulator, tmp_path):
    emu = _syncing(kube_emulator)
    app = make_app(tmp_path, emu.write_kubeconfig(tmp_path / "kc"))
    async with app.run_test(size=(120, 40)) as pilot:
        await connected(pilot, app)
        for lo, hi, change in (("2", "6", "min 1 → 2, max 8 → 6"), ("3", "5", "min 2 → 3, max 6 → 5")):
            screen = await _edit(pilot, app, lo, hi)
            assert screen.change == change
            rv = _hpa_rv(emu)
            emu.wait_until(lambda rv=rv: _hpa_rv(emu) > rv, message="an HPA status sync while confirming")
            await pilot.press("y")
            await until(pilot, lambda screen=screen: screen.state == "done", what="the edit done")
            assert screen.result == "ok", screen.result_text
            await pilot.press("escape")
            spec = emu.get("horizontalpodautoscalers", "vllm", NS)["spec"]
            assert (spec["minReplicas"], spec["maxReplicas"]) == (int(lo), int(hi))
    assert [(e["action"], e["result"]) for e in audit(tmp_path)] == [("kube.hpa", "ok"), ("kube.hpa", "ok")]


async def test_h_when_the_bounds_changed_meanwhile_reconfirms_with_the_new_diff(kube_emulator, tmp_path):
    emu = _syncing(kube_emulator)
    app = make_app(tmp_path, emu.write_kubeconfig(tmp_path / "kc"))
    async with app.run_test(size=(120, 40)) as pilot:
        await connected(pilot, app)
        screen = await _edit(pilot, app, "2", "6")
        emu.patch("horizontalpodautoscalers", "vllm", {"spec": {"maxReplicas": 10}}, NS)  # someone else
        await pilot.press("y")
        await until(pilot, lambda: screen.state == "review" and screen.dry_run_ok
                    and "spec.maxReplicas 8 → 10" in text(screen.query_one("#confirm-status")),
                    what="re-confirmation")
        status = text(screen.query_one("#confirm-status"))
        assert "nothing was sent" in status and "confirm again" in status
        assert screen.change == "min 1 → 2, max 10 → 6"  # the re-read object
        assert emu.get("horizontalpodautoscalers", "vllm", NS)["spec"]["maxReplicas"] == 10
        await pilot.press("y")
        await until(pilot, lambda: screen.state == "done", what="the edit done")
        assert screen.result == "ok", screen.result_text
    spec = emu.get("horizontalpodautoscalers", "vllm", NS)["spec"]
    assert (spec["minReplicas"], spec["maxReplicas"]) == (2, 6)
    assert [(e["action"], e["result"]) for e in audit(tmp_path)] == [("kube.hpa", "conflict"), ("kube.hpa", "ok")]
