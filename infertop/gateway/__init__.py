"""``infertop gateway``: an OpenAI-compatible priority proxy in front of N vLLM engines.

Modules, one job each: :mod:`config` (the ``gateway:`` section), :mod:`policy`
(classes, weights, promotion, engine choice — pure, no I/O), :mod:`server`
(the proxy), :mod:`upstream` (engine /metrics polling), :mod:`admin` (the
token-protected admin API), :mod:`metrics` (Prometheus text), :mod:`files`
(API keys and weights files), :mod:`loadgen` (the demo's HTTP load).
"""
