"""Probe an OpenAI-compatible server (vLLM) on a pod, and compare GPU types side by side.

Used by the vLLM matrix examples, one leg per GPU type, from the job's gpu-ci venv::

    python -m gpuci.pods.health.llmprobe probe --url URL --model M --gpu G --cost-per-hr C \
        --out leg.json
    python -m gpuci.pods.health.llmprobe table legs/*.json   # markdown, also to the job summary

``probe`` checks ``/v1/models`` lists the model, sends one short completion, and records the
latency and tokens per second (completion tokens / wall time). ``table`` turns the legs into
one row per GPU type with its cost per hour and USD per million generated tokens.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path
from typing import Any

from gpuci import settings
from gpuci.redact import excerpt
from gpuci.runtime import markdown_table

MAX_BODY = 1 << 20


def _answer(client: Any, method: str, url: str, what: str, **kwargs: Any) -> dict[str, Any]:
    """One call's JSON object, read only up to :data:`MAX_BODY` and parsed as untrusted."""
    from gpuci import untrusted_json

    with client.stream(method, url, **kwargs) as response:
        response.raise_for_status()
        try:
            data = untrusted_json.read_chunks(response.iter_bytes(), MAX_BODY)
            return untrusted_json.parse_object(data, MAX_BODY)
        except untrusted_json.Unusable as exc:
            raise RuntimeError(f"{what}: the server's answer is unusable: {exc}") from None


def probe(url: str, model: str, prompt: str, max_tokens: int, timeout: float) -> dict[str, Any]:
    """List the models, then one completion; the whole probe (both calls, headers and bodies)
    ends within ``timeout`` seconds: httpx's timeouts bound each read, so a server trickling
    a byte a read kept a leg, and its pod, waiting for ever."""
    from gpuci import httpclients

    base = url.rstrip("/")
    limit = httpclients.Deadline.after(timeout)
    with (
        httpclients.new_client(timeout=timeout, agent="llm-probe") as client,
        httpclients.deadline(limit),
    ):
        models = _answer(client, "GET", f"{base}/v1/models", "/v1/models")
        listed = models.get("data")
        ids = [m.get("id") for m in listed or [] if isinstance(m, dict)]
        ids = ids if isinstance(listed, list) else []
        if model not in ids:
            shown = excerpt(", ".join(map(str, ids)), 300)
            raise RuntimeError(f"{model} is not served (models: {shown})")
        start = time.perf_counter()
        body = _answer(
            client,
            "POST",
            f"{base}/v1/completions",
            "the completion",
            json={"model": model, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0},
        )
        latency = time.perf_counter() - start
    choices = body.get("choices")
    first = choices[0] if isinstance(choices, list) and choices else None
    first = first if isinstance(first, dict) else {}
    usage = body.get("usage")
    usage = usage if isinstance(usage, dict) else {}
    text = str(first.get("text") or "")
    tokens = usage.get("completion_tokens")
    tokens = tokens if isinstance(tokens, int) and not isinstance(tokens, bool) else 0
    if not text.strip() or tokens <= 0:
        raise RuntimeError("the completion came back empty")
    return {
        "latency_s": round(latency, 4),
        "completion_tokens": tokens,
        "tokens_per_s": round(tokens / latency, 2) if latency > 0 else math.inf,
    }


def _leg(path: Path) -> dict[str, Any]:
    """One leg's file (an artifact another job wrote): untrusted, so bounded and checked."""
    from gpuci import untrusted_json

    try:
        return untrusted_json.parse_object(untrusted_json.read_text(path, MAX_BODY), MAX_BODY)
    except (OSError, untrusted_json.Unusable) as exc:
        return {"gpu": path.stem, "error": excerpt(f"unreadable leg file {path.name}: {exc}")}


def table(legs: list[dict[str, Any]]) -> str:
    rows = []
    for leg in sorted(legs, key=lambda item: -float(item.get("tokens_per_s") or 0)):
        rate, tps = float(leg.get("cost_per_hr") or 0), float(leg.get("tokens_per_s") or 0)
        per_m = rate / (tps * 3600) * 1e6 if tps > 0 else float("nan")
        rows.append(
            [
                leg.get("gpu", "?"),
                f"{rate:.2f}",
                f"{float(leg.get('latency_s') or 0):.2f}",
                f"{tps:.1f}",
                "-" if math.isnan(per_m) else f"{per_m:.2f}",
                leg.get("error") or "ok",
            ]
        )
    return markdown_table(
        ["GPU type", "USD/h", "latency s", "tokens/s", "USD per 1M tokens", "result"], rows
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gpuci.pods.health.llmprobe")
    sub = parser.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("probe")
    p.add_argument("--url", required=True)
    p.add_argument("--model", required=True)
    p.add_argument("--gpu", required=True)
    p.add_argument("--cost-per-hr", type=float, default=0.0)
    p.add_argument("--prompt", default="The capital of France is")
    p.add_argument("--max-tokens", type=int, default=32)
    p.add_argument(
        "--timeout", type=float, default=120.0, help="seconds for the whole probe, both calls"
    )
    p.add_argument("--out", required=True)
    t = sub.add_parser("table")
    t.add_argument("legs", nargs="+")
    args = parser.parse_args(argv)
    if args.cmd == "probe":
        leg: dict[str, Any] = {
            "gpu": args.gpu,
            "model": args.model,
            "cost_per_hr": args.cost_per_hr,
        }
        code = 0
        try:
            leg.update(probe(args.url, args.model, args.prompt, args.max_tokens, args.timeout))
        except Exception as exc:
            leg["error"] = excerpt(f"{type(exc).__name__}: {exc}")
            print(f"probe failed: {leg['error']}", file=sys.stderr)
            code = 1
        Path(args.out).write_text(json.dumps(leg, indent=2))
        print(json.dumps(leg))
        return code
    legs = [_leg(Path(f)) for f in args.legs]
    md = "### vLLM across GPU types\n\n" + table(legs) + "\n"
    print(md)
    summary = settings.GITHUB_STEP_SUMMARY.value()
    if summary:
        with open(summary, "a", encoding="utf-8") as handle:
            handle.write(md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
