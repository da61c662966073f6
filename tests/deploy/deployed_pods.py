"""The pods deploy/'s manifests run, and the `flint serve` command line of each, as a pod
would see it once its controller and Kubernetes have filled it in."""

from __future__ import annotations

import argparse
import contextlib
import io
import re
from dataclasses import dataclass, field

from api.server.cli import build_parser

LWS_API_VERSION = "leaderworkerset.x-k8s.io/v1"
# Labels the LeaderWorkerSet controller puts on every pod of a group.
LWS_NAME_LABEL = "leaderworkerset.sigs.k8s.io/name"
LWS_WORKER_INDEX_LABEL = "leaderworkerset.sigs.k8s.io/worker-index"
ENV_REFERENCE = re.compile(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)")  # Kubernetes' $(VAR) in args
SECRET_VALUE = "from-a-secret"  # what an env var read from a Secret stands for


@dataclass
class Pod:
    """One pod template, with what its controller adds to the pods made from it."""

    source: str  # "deploy/gpu: Deployment/flint", "...: LeaderWorkerSet/x leader"
    template: dict  # a PodTemplateSpec
    role: str  # "replica" (Deployment), "leader" or "worker" (LeaderWorkerSet)
    group_size: int = 1  # processes that serve one model together
    injected_env: dict[str, str] = field(default_factory=dict)
    injected_labels: dict[str, str] = field(default_factory=dict)
    claimed_volumes: tuple[str, ...] = ()  # volumes from the controller's claim templates

    @property
    def spec(self) -> dict:
        return self.template["spec"]

    @property
    def labels(self) -> dict[str, str]:
        return {**self.template.get("metadata", {}).get("labels", {}), **self.injected_labels}

    def flint_containers(self) -> list[dict]:
        """The containers that run `flint serve`."""
        return [container for container in self.spec["containers"] if flint_argv(container)]

    def env(self, container: dict) -> dict[str, str]:
        """The container's environment: its own variables and those its controller sets."""
        own = {variable["name"]: variable.get("value", SECRET_VALUE) for variable in container.get("env", [])}
        return {**own, **self.injected_env}

    def argv(self, container: dict) -> list[str]:
        """The container's `flint` arguments with $(VAR) expanded, as Kubernetes does."""
        env = self.env(container)
        return [ENV_REFERENCE.sub(lambda match: env.get(match[1], match[0]), argument)
                for argument in flint_argv(container)]


def pods_in(documents: list[dict], source: str) -> list[Pod]:
    pods = []
    for document in documents:
        name = f"{source}: {document['kind']}/{document['metadata']['name']}"
        if document["kind"] == "Deployment":
            pods.append(Pod(name, document["spec"]["template"], "replica"))
        elif document.get("apiVersion") == LWS_API_VERSION:
            pods += leader_worker_pods(document, name)
    return pods


def leader_worker_pods(lws: dict, source: str) -> list[Pod]:
    """A group's leader (worker index 0) and, if the group has more pods, a worker (index 1)."""
    name, template = lws["metadata"]["name"], lws["spec"]["leaderWorkerTemplate"]
    size = template.get("size", 1)
    roles = [("leader", template.get("leaderTemplate", template["workerTemplate"]))]
    if size > 1:
        roles.append(("worker", template["workerTemplate"]))
    pods = []
    for index, (role, pod_template) in enumerate(roles):
        # The leader's DNS name in group 0: <lws>-0.<the LWS's headless Service>.<namespace>
        env = {"LWS_LEADER_ADDRESS": f"{name}-0.{name}.default", "LWS_GROUP_SIZE": str(size),
               "LWS_WORKER_INDEX": str(index)}
        labels = {LWS_NAME_LABEL: name, LWS_WORKER_INDEX_LABEL: str(index)}
        claims = tuple(claim["metadata"]["name"] for claim in template.get("volumeClaimTemplates", []))
        pods.append(Pod(f"{source} {role}", pod_template, role, size, env, labels, claims))
    return pods


def flint_argv(container: dict) -> list[str]:
    """The arguments after `flint` when the container runs `flint serve`, else []."""
    argv = [*container.get("command", []), *container.get("args", [])]
    return argv[1:] if argv[:2] == ["flint", "serve"] else []


def parse_serve(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    """`flint`'s own parser on argv: the flags it knows, and the arguments it does not.
    A value it refuses (a bad --dtype, say) fails with argparse's message."""
    errors = io.StringIO()
    try:
        with contextlib.redirect_stderr(errors):
            return build_parser().parse_known_args(argv)
    except SystemExit:
        raise AssertionError(f"flint {' '.join(argv)}: {errors.getvalue().strip()}") from None


def flag_value(argv: list[str], flag: str) -> str | None:
    """The last value given to `flag` (argparse keeps the last), in either spelling."""
    value = None
    for index, argument in enumerate(argv):
        if argument.startswith(f"{flag}="):
            value = argument.split("=", 1)[1]
        elif argument == flag and index + 1 < len(argv):
            value = argv[index + 1]
    return value


def container_port(container: dict, port: int | str) -> int:
    """A probe's or Service's port, by number or by the name of one of the container's ports."""
    if isinstance(port, int):
        return port
    named = {entry.get("name"): entry["containerPort"] for entry in container.get("ports", [])}
    assert port in named, f"container {container['name']} has no port named {port}"
    return named[port]


def prestop_sleep(container: dict) -> int:
    """Seconds the container's preStop hook sleeps (0 without one)."""
    command = container.get("lifecycle", {}).get("preStop", {}).get("exec", {}).get("command", [])
    return int(command[1]) if command[:1] == ["sleep"] else 0
