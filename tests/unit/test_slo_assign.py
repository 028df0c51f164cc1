"""Class assignment by engine, Deployment, model and gateway class (issue 25 item 1): the precedence
engine > Deployment > model > gateway class > fitted from history, each answer naming its rule; the
Deployment joined through the cluster's pods, gateway classes through the queue sources and the
InferenceObjectives of an engine's InferencePool; config mistakes as one line with file, line and field."""

from __future__ import annotations

import pytest

from infertop.analysis.slo.assign import Assigner, engine_context
from infertop.analysis.slo.report import SloWatch
from infertop.analysis.slo.targets import classes_from
from infertop.config import ConfigError, SloClassConfig, SloClassesConfig, parse_config
from infertop.domain.engine import EngineStats
from infertop.domain.kube import ClusterSnapshot, InferenceObjectiveView, InferencePoolView, PodView
from infertop.state.fleet_types import ClusterState, EngineState, FleetState, Freshness, Slo
from infertop.domain.queues import QueueClass, QueueEngine, QueueSource
from infertop.analysis.slo.text import slo_lines


def _section(**rules) -> SloClassesConfig:
    """chat, code and batch, each with the rules given as ``<class>_<rule>=[patterns]``."""
    classes = {}
    for name, e2e in (("chat", 5.0), ("code", 1.0), ("batch", 60.0)):
        kw = {k.split("_", 1)[1]: v for k, v in rules.items() if k.startswith(name + "_")}
        classes[name] = SloClassConfig(e2e_p99_s=e2e, **kw)
    return SloClassesConfig(classes=classes)


def _pod(name: str, deployment: str | None, ip: str, labels=None) -> PodView:
    return PodView(namespace="infer", name=name, phase="Running", status="Running", ready=True, ip=ip, port=8000,
                   owner_kind="Deployment" if deployment else None, owner_name=deployment, labels=labels or {})


def _state(cluster: ClusterSnapshot | None = None, queues=()) -> FleetState:
    engines = (EngineStats(name="llama-0", url="http://10.0.0.1:8000", model="llama-8b", state="up"),
               EngineStats(name="llama-1", url="http://10.0.0.2:8000", model="llama-8b", state="up"),
               EngineStats(name="coder-0", url="http://10.0.0.3:8000", model="qwen-coder", state="up"))
    return FleetState(tick=1, taken_at=100.0, refresh_s=1.0, window_s=60.0, slo=Slo(2, 0.1, 60, 1, 90),
                      engines=tuple(EngineState(s, Freshness("fresh")) for s in engines),
                      cluster=ClusterState(cluster) if cluster is not None else None, queues=tuple(queues))


def _cluster(**kw) -> ClusterSnapshot:
    pods = (_pod("llama-0", "llama", "10.0.0.1", {"app": "vllm"}), _pod("llama-1", "llama", "10.0.0.2", {"app": "vllm"}),
            _pod("coder-0", None, "10.0.0.3"))
    return ClusterSnapshot(context="kind", namespaces=("infer",), taken_at=100.0, pods=pods, **kw)


def _classes_of(watch: SloWatch, state: FleetState) -> dict[str, tuple[str, str]]:
    return {e["name"]: (e["class"], e["how"]) for e in watch.update(state, {})["engines"]}


def test_a_deployment_is_joined_through_its_pods_and_beats_the_model():
    watch = SloWatch(_section(chat_deployments=["infer/llama"], batch_models=["llama-*"], code_models=["qwen-coder"]))
    got = _classes_of(watch, _state(_cluster()))
    assert got["llama-0"] == ("chat", "by Deployment infer/llama")
    assert got["llama-1"] == ("chat", "by Deployment infer/llama")
    assert got["coder-0"] == ("code", "by model qwen-coder")  # no Deployment owns its pod: its model decides
    # without the cluster there is no Deployment: the model rule holds them
    got = _classes_of(SloWatch(_section(chat_deployments=["infer/llama"], batch_models=["llama-*"])), _state())
    assert got["llama-0"] == ("batch", "by model llama-8b (matches 'llama-*')")


def test_precedence_engine_over_deployment_over_model_over_gateway_class():
    a = Assigner(classes_from(_section(code_engines=["llama-1"], chat_deployments=["infer/*"],
                                       batch_models=["llama-8b"], code_gateway_classes=["realtime"]).classes))
    s0 = EngineStats(name="llama-0", url="", model="llama-8b")
    s1 = EngineStats(name="llama-1", url="", model="llama-8b")
    other = EngineStats(name="x", url="", model="other")
    assert a.matched(s1.name, s1.model, "infer/llama", ("realtime",))[1] == "by engine llama-1"
    assert a.matched(s0.name, s0.model, "infer/llama", ("realtime",))[1] == "by Deployment infer/llama (matches 'infer/*')"
    assert a.matched(s0.name, s0.model, None, ("realtime",))[1] == "by model llama-8b"
    c, how = a.matched(other.name, other.model, None, ("batch-lane", "realtime"))
    assert c.name == "code" and how == "by gateway class realtime; in front of it also batch-lane"
    c, how = a.assign(other, healthy=True)
    assert how.startswith("no class matches it") and c.name == "batch"  # fitted (loosest until history says)


def test_gateway_classes_from_the_queue_sources_and_inference_objectives():
    gw = QueueSource(name="gw", kind="gateway", classes=(QueueClass("realtime"), QueueClass("bulk")),
                     engines=(QueueEngine("a", engine="coder-0"),))
    cluster = _cluster(inference_pools=(InferencePoolView("infer", "llama-pool", selector="app=vllm"),),
                       inference_objectives=(InferenceObjectiveView("infer", "interactive", pool="llama-pool",
                                                                    priority=10),
                                             InferenceObjectiveView("infer", "elsewhere", pool="no-pool")))
    deployments, gateway = engine_context(_state(cluster, [gw]))
    assert deployments == {"llama-0": "infer/llama", "llama-1": "infer/llama"}
    assert gateway == {"coder-0": ("realtime", "bulk"), "llama-0": ("interactive",), "llama-1": ("interactive",)}
    watch = SloWatch(_section(chat_gateway_classes=["interactive"], code_gateway_classes=["bulk"]))
    got = _classes_of(watch, _state(cluster, [gw]))
    assert got["llama-0"] == ("chat", "by gateway class interactive")
    assert got["coder-0"] == ("code", "by gateway class bulk; in front of it also realtime")
    report = watch.update(_state(cluster, [gw]), {})
    assert "· llama-0 → chat (by gateway class interactive)" in "\n".join(slo_lines(report))


BAD = [
    ("slo_classes:\n  classes:\n    chat:\n      deployments: [infer/llama, llama]\n", 4,
     "slo_classes.classes.chat.deployments[1]", "a Deployment is namespace/name, got 'llama'"),
    ("slo_classes:\n  classes:\n    chat:\n      gateway_classes: realtime\n", 4,
     "slo_classes.classes.chat.gateway_classes", "expected a list, got 'realtime'"),
    ("slo_classes:\n  classes:\n    chat:\n      engines: ['']\n", 4,
     "slo_classes.classes.chat.engines[0]", "an empty pattern matches nothing"),
]


@pytest.mark.parametrize("text, line, fpath, why", BAD)
def test_rule_mistakes_name_file_line_and_field(text, line, fpath, why):
    with pytest.raises(ConfigError) as e:
        parse_config(text, "/etc/infertop.yaml")
    assert str(e.value).startswith(f"/etc/infertop.yaml:{line}: {fpath}: {why}"), str(e.value)


def test_the_rules_load_from_yaml():
    cfg = parse_config("slo_classes:\n  classes:\n    chat:\n      deployments: [infer/llama]\n"
                       "      models: ['llama-*']\n      gateway_classes: [interactive]\n      engines: [e0]\n",
                       "/etc/infertop.yaml")
    chat = classes_from(cfg.slo_classes.classes)[0]
    assert (chat.engines, chat.deployments, chat.models, chat.gateway_classes) == (
        ("e0",), ("infer/llama",), ("llama-*",), ("interactive",))
