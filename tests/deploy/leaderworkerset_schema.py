"""A JSON schema of the LeaderWorkerSet API (leaderworkerset.x-k8s.io/v1), written for the
tests from the API's Go types: kubernetes-validate knows only the core API, and the tests
download nothing. The pod templates and claim templates inside are left open here; the
tests validate them as core PodTemplateSpecs and PersistentVolumeClaims."""

from __future__ import annotations

POD_TEMPLATE = {"type": "object", "required": ["spec"]}
INT_OR_PERCENT = {"anyOf": [{"type": "integer", "minimum": 0}, {"type": "string", "pattern": r"^\d+%$"}]}


def closed(properties: dict, required: tuple[str, ...] = ()) -> dict:
    """An object with only these properties: a misspelled field is an error, as in strict
    Kubernetes validation."""
    return {"type": "object", "properties": properties, "required": list(required), "additionalProperties": False}


LEADER_WORKER_TEMPLATE = closed({
    "leaderTemplate": POD_TEMPLATE,
    "workerTemplate": POD_TEMPLATE,
    "size": {"type": "integer", "minimum": 1},  # pods per group, the leader included
    "restartPolicy": {"enum": ["RecreateGroupOnPodRestart", "RecreateGroupAfterStart", "None", "Default"]},
    "subGroupPolicy": closed({"subGroupPolicyType": {"enum": ["LeaderWorker", "LeaderExcluded"]},
                              "subGroupSize": {"type": "integer", "minimum": 1}}),
    "volumeClaimTemplates": {"type": "array", "items": {"type": "object", "required": ["metadata", "spec"]}},
    "persistentVolumeClaimRetentionPolicy": closed({"whenDeleted": {"enum": ["Retain", "Delete"]},
                                                    "whenScaled": {"enum": ["Retain", "Delete"]}}),
}, required=("workerTemplate",))

LEADER_WORKER_SET = closed({
    "apiVersion": {"const": "leaderworkerset.x-k8s.io/v1"},
    "kind": {"const": "LeaderWorkerSet"},
    # The name is also the name of the headless Service the controller makes: a DNS label.
    "metadata": {"type": "object", "required": ["name"], "properties": {
        "name": {"type": "string", "maxLength": 63, "pattern": r"^[a-z]([-a-z0-9]*[a-z0-9])?$"}}},
    "spec": closed({
        "replicas": {"type": "integer", "minimum": 0},  # groups
        "leaderWorkerTemplate": LEADER_WORKER_TEMPLATE,
        "rolloutStrategy": closed({
            "type": {"const": "RollingUpdate"},
            "rollingUpdateConfiguration": closed({"partition": {"type": "integer", "minimum": 0},
                                                  "maxUnavailable": INT_OR_PERCENT, "maxSurge": INT_OR_PERCENT}),
        }, required=("type",)),
        "startupPolicy": {"enum": ["LeaderCreated", "LeaderReady"]},
        "networkConfig": closed({"subdomainPolicy": {"enum": ["Shared", "UniquePerReplica"]}},
                                required=("subdomainPolicy",)),
    }, required=("leaderWorkerTemplate",)),
}, required=("apiVersion", "kind", "metadata", "spec"))
