"""PodDisruptionBudgets against a set of evictions, counted together (pure).

The server checks each eviction alone against the budget as it is at that moment, so a dry run of every
eviction passes even when the second one, sent after the first, is refused (429). This counts the
evictions a node drain would send against every budget that selects them, before the drain is confirmed.
"""

from __future__ import annotations

from dataclasses import dataclass

from ...sources.kube.view import selector_matches

__all__ = ["PdbCheck", "check_pdbs", "ordinal"]

_ORDINALS = ("first", "second", "third", "fourth", "fifth", "sixth", "seventh", "eighth", "ninth", "tenth")


def ordinal(n: int) -> str:
    """1 → "first" … 10 → "tenth", then "11th"."""
    return _ORDINALS[n - 1] if 1 <= n <= len(_ORDINALS) else f"{n}th"


@dataclass(frozen=True)
class PdbCheck:
    """The budgets the evictions touch: ``refusals`` the lines of those they break (one per budget),
    ``fits`` those they stay within ("PDB default/vllm allows 1 disruption: 1 eviction within it")."""

    refusals: tuple[str, ...] = ()
    fits: tuple[str, ...] = ()


def _meta(obj: dict) -> dict:
    return obj.get("metadata") or {}


def _ready(pod: dict) -> bool:
    conds = (pod.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conds)


def _names(names: list[str]) -> str:
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")


def check_pdbs(evictions: list[dict], pdbs: list[dict]) -> PdbCheck:
    """Count ``evictions`` (pods, in the order they are sent) against ``pdbs`` (as listed, with the
    status the disruption controller keeps). Only a Ready pod uses up a budget: evicting one that is not
    Ready leaves the healthy count as it was."""
    refusals, fits = [], []
    for pdb in sorted(pdbs, key=lambda o: (_meta(o).get("namespace") or "", _meta(o).get("name") or "")):
        meta, spec, status = _meta(pdb), pdb.get("spec") or {}, pdb.get("status") or {}
        ns = meta.get("namespace")
        hit = [p for p in evictions if _meta(p).get("namespace") == ns
               and selector_matches(spec.get("selector"), _meta(p).get("labels"))]
        healthy_hit = [p for p in hit if _ready(p)]
        if not healthy_hit:
            continue
        where = f"PDB {ns}/{meta.get('name')}"
        if "disruptionsAllowed" not in status:
            refusals.append(f"{where} has no status yet (its controller has not counted its pods): how many of "
                            f"{_plural(len(healthy_hit), 'eviction')} it allows is unknown until the drain runs")
            continue
        allowed = int(status.get("disruptionsAllowed") or 0)
        healthy = int(status.get("currentHealthy") or 0)
        desired = int(status.get("desiredHealthy") or 0)
        expected = int(status.get("expectedPods") or 0)
        k = len(healthy_hit)
        if k <= allowed:
            fits.append(f"{where} allows {_plural(allowed, 'disruption')}: {_plural(k, 'eviction')} within it")
            continue
        names = [str(_meta(p).get("name") or "?") for p in healthy_hit]
        left = healthy - k
        if spec.get("maxUnavailable") is not None:
            bound = f"makes {expected - left} unavailable of maxUnavailable {spec['maxUnavailable']}"
        elif spec.get("minAvailable") is not None:
            shown = spec["minAvailable"]
            shown = f"{shown} ({desired})" if isinstance(shown, str) else shown
            bound = f"leaves {max(left, 0)} of minAvailable {shown}"
        else:
            bound = f"leaves {max(left, 0)} healthy of {desired} required"
        first_refused = allowed + 1
        if k - allowed == 1:
            when = f"the {ordinal(first_refused)} eviction will be refused (429) until one is back"
        else:
            when = (f"from the {ordinal(first_refused)} eviction on, {k - allowed} will be refused (429) "
                    "until pods are back")
        subject = f"evicting {_names(names)}" if k > 1 else f"evicting {names[0]}"
        if allowed == 0 and k == 1:
            when = "the eviction will be refused (429) until another pod is healthy"
        refusals.append(f"! {subject} {bound} for {where}: {when}")
    return PdbCheck(tuple(refusals), tuple(fits))
