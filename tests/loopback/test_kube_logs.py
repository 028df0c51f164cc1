"""Container logs through the API (KubeSession.pod_log / follow_pod_log) against the emulator over
HTTP: the current and the previous container after a restart, tail, timestamps, follow."""

from __future__ import annotations

import threading

import pytest

from infertop.sources.kube.session import KubeError, KubeSession

TOKEN = "kube-logs-token"
NS = "default"


@pytest.fixture
def emu(kube_emulator):
    return kube_emulator(TOKEN, reconcile_interval=0.02)


def connect(emu, tmp_path) -> KubeSession:
    return KubeSession.connect(str(emu.write_kubeconfig(tmp_path / "kubeconfig")))


def running_pod(emu, app: str) -> str:
    def find():
        pods = emu.list("pods", NS, f"app={app}")
        return pods and "running" in (pods[0]["status"].get("containerStatuses") or [{}])[0].get("state", {}) \
            and pods[0]["metadata"]["name"]
    return emu.wait_until(find, message=f"a running {app} pod")


def test_previous_container_log_after_a_restart_ends_in_how_it_ended(emu, tmp_path):
    emu.add_deployment(NS, "vllm", replicas=1)
    pod = running_pod(emu, "vllm")
    emu.append_pod_log(pod, "INFO Starting vLLM API server\nINFO loading weights\n")
    s = connect(emu, tmp_path)
    with pytest.raises(KubeError) as ei:  # no restart yet: there is no previous container
        s.pod_log(NS, pod, previous=True)
    assert ei.value.status == 400 and "previous terminated container" in str(ei.value)
    emu.restart_container(pod, reason="OOMKilled", exit_code=137)
    emu.append_pod_log(pod, "INFO Starting vLLM API server\n")
    previous = s.pod_log(NS, pod, previous=True)
    assert previous.splitlines() == ["INFO Starting vLLM API server", "INFO loading weights",
                                     "container vllm terminated: OOMKilled (exit code 137)"]
    assert s.pod_log(NS, pod) == "INFO Starting vLLM API server\n"
    assert s.pod_log(NS, pod, previous=True, tail_lines=1).strip().endswith("OOMKilled (exit code 137)")
    stamped = s.pod_log(NS, pod, timestamps=True).split(" ", 1)
    assert stamped[0].endswith("Z") and "T" in stamped[0] and stamped[1] == "INFO Starting vLLM API server\n"
    status = emu.get("pods", pod, NS)["status"]["containerStatuses"][0]
    assert status["restartCount"] == 1 and status["lastState"]["terminated"]["reason"] == "OOMKilled"
    s.close()


def test_a_crash_looping_container_keeps_the_log_of_the_instance_before(emu, tmp_path):
    emu.crash_period = 0.2
    emu.fail_args("--oom-me", exit_code=137, termination_reason="OOMKilled")
    emu.add_deployment(NS, "crashy", replicas=1, args=["--oom-me"])
    pod = emu.wait_until(lambda: next((p["metadata"]["name"] for p in emu.list("pods", NS, "app=crashy")
                                       if (p["status"].get("containerStatuses") or [{}])[0].get("restartCount")),
                                      None), message="a restart")
    s = connect(emu, tmp_path)
    lines = s.pod_log(NS, pod, previous=True).splitlines()
    assert lines[0] == "starting --oom-me" and lines[-1] == "container vllm terminated: OOMKilled (exit code 137)"
    term = emu.get("pods", pod, NS)["status"]["containerStatuses"][0]["lastState"]["terminated"]
    assert (term["reason"], term["exitCode"]) == ("OOMKilled", 137)
    s.close()


def test_follow_streams_new_lines_and_ends_when_the_container_restarts(emu, tmp_path):
    emu.add_deployment(NS, "vllm", replicas=1)
    pod = running_pod(emu, "vllm")
    emu.append_pod_log(pod, "one\ntwo\n")
    s = connect(emu, tmp_path)
    follow = s.follow_pod_log(NS, pod, tail_lines=1)
    got: list[str] = []
    first = threading.Event()

    def read():
        for line in follow:
            got.append(line)
            first.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    assert first.wait(10)
    emu.append_pod_log(pod, "three\n")
    emu.wait_until(lambda: "three" in got, message="the followed line")
    emu.restart_container(pod)
    reader.join(10)
    assert not reader.is_alive()  # the instance ended: so did the stream
    assert got == ["two", "three", "container vllm terminated: OOMKilled (exit code 137)"]
    s.close()


def test_close_ends_a_follow_of_a_quiet_container(emu, tmp_path):
    emu.add_deployment(NS, "vllm", replicas=1)
    pod = running_pod(emu, "vllm")
    s = connect(emu, tmp_path)
    follow = s.follow_pod_log(NS, pod)
    done = threading.Event()
    threading.Thread(target=lambda: (list(follow), done.set()), daemon=True).start()
    follow.close()
    assert done.wait(10)
    s.close()
