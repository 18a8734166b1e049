"""The in-toto form of a provenance record: a Statement v1 whose predicate is SLSA provenance
v1, the trained artifacts as subjects, the commit, the restored datasets/weights (by manifest
digest) and the downloads under ``resolvedDependencies``, the judged metrics as a byproduct.
"""

from __future__ import annotations

from typing import Any

__all__ = ["BUILD_TYPE", "PREDICATE_TYPE", "STATEMENT_TYPE", "statement"]

STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
PREDICATE_TYPE = "https://slsa.dev/provenance/v1"
BUILD_TYPE = "https://gpuci.dev/buildtypes/training/v1"


def _dependency(ds: dict[str, Any]) -> dict[str, Any]:
    name = str(ds.get("matched_key") or ds.get("key") or "dataset")
    descriptor: dict[str, Any] = {
        "name": name,
        "uri": f"gpuci-cache:{name}",
        "digest": {"sha256": str(ds["manifest"]).removeprefix("sha256:")},
        "annotations": {
            k: ds[k] for k in ("key", "matched_key", "path", "files", "bytes", "store") if k in ds
        },
    }
    if ds.get("store"):
        descriptor["downloadLocation"] = str(ds["store"])
    return descriptor


def statement(record: dict[str, Any]) -> dict[str, Any]:
    """The in-toto Statement v1 with a SLSA provenance v1 predicate, built from the record."""
    source, run = record["source"], record["run"]
    deps, byproducts = _dependencies(record), _byproducts(record)
    predicate = {
        "buildDefinition": {
            "buildType": BUILD_TYPE,
            "externalParameters": {
                "workflow": {
                    "ref": run["workflow"],
                    "repository": source["repository"],
                    "job": run["job"],
                },
                "gate": (record.get("gate") or {}).get("rules"),
            },
            "internalParameters": {
                "platform": run["platform"],
                "pull_request": run["pull_request"],
                "gpu": record.get("gpu"),
                "python": record.get("python"),
            },
            "resolvedDependencies": deps,
        },
        "runDetails": {
            "builder": {"id": run["builder_id"]},
            "metadata": {
                "invocationId": run["run_url"] or run["run_id"] or "local",
                "finishedOn": record["created"],
            },
            "byproducts": byproducts,
        },
    }
    return {
        "_type": STATEMENT_TYPE,
        "subject": [
            {"name": a["path"], "digest": {"sha256": a["sha256"]}} for a in record["artifacts"]
        ],
        "predicateType": PREDICATE_TYPE,
        "predicate": predicate,
    }


def _dependencies(record: dict[str, Any]) -> list[dict[str, Any]]:
    """resolvedDependencies: the commit, each cached dataset (by manifest), each download."""
    source = record["source"]
    deps: list[dict[str, Any]] = []
    if source.get("commit"):
        uri = (
            f"git+{source['server_url']}/{source['repository']}"
            if source.get("server_url")
            else source.get("repository") or "git"
        )
        if source.get("ref"):
            uri += f"@{source['ref']}"
        deps.append({"uri": uri, "digest": {"gitCommit": source["commit"]}})
    deps += [_dependency(ds) for ds in record["datasets"]]
    deps += [
        {
            "name": d.get("path", ""),
            "uri": d.get("url", ""),
            "digest": {"sha256": d["sha256"]},
            "annotations": {"bytes": d.get("bytes")},
        }
        for d in record.get("downloads", [])
    ]
    return deps


def _byproducts(record: dict[str, Any]) -> list[dict[str, Any]]:
    """byproducts: the metrics file the gate judged, with its verdict."""
    if not record.get("metrics"):
        return []
    m = record["metrics"]
    return [
        {
            "name": m["path"],
            "digest": {"sha256": m["sha256"]},
            "mediaType": "application/json",
            "annotations": {"verdict": record["verdict"], "values": m.get("values")},
        }
    ]
