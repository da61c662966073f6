"""deploy/gateway's objects against each other and against Flint: the InferencePool selects the
serving pods on the port they serve, the endpoint picker (EPP) serves that pool with flags it
knows and may read what it watches, its configuration (a YAML file in a ConfigMap) is what the
EPP decodes, reads metrics Flint exports and pins the session headers, and the HTTPRoute sends
Flint's API to the pool."""

from __future__ import annotations

import ast
from pathlib import PurePosixPath

import jsonschema
import pytest
import yaml
from deployed_pods import Pod
from inference_extension_schema import (
    ALPHA_PLUGINS,
    ENDPOINT_PICKER_CONFIG,
    EPP_FLAG_DEFAULTS,
    EPP_FLAGS,
    INFERENCE_POOL_API_VERSION,
)
from test_manifests import KUSTOMIZATIONS, ROOT, port_flag, pods, rendered, selected

GATEWAY_KUSTOMIZATIONS = ["deploy/gateway"]
# Fireworks' session header first, then the multi-turn one: the first present wins.
SESSION_HEADERS = ["x-session-affinity", "x-multi-turn-session-id"]
# The labels the EPP reads a pod's engine from (llm-d-router's, then GIE's older one); a pod
# with neither gets the extractor's defaultEngine.
ENGINE_LABELS = ("llm-d.ai/engine-type", "inference.networking.k8s.io/engine-type")
# The metrics each scorer ranks pods by, as the extractor's engine config names them.
SCORER_METRICS = {"queue-scorer": "queuedRequestsSpec", "kv-cache-utilization-scorer": "kvUsageSpec"}
METRIC_SPECS = ("queuedRequestsSpec", "runningRequestsSpec", "kvUsageSpec", "loraSpec", "cacheInfoSpec",
                "cacheBlockSizeSpec", "cacheNumBlocksSpec")


def of_kind(kustomization: str, kind: str) -> list[dict]:
    return [document for document in rendered(kustomization) if document["kind"] == kind]


def named(kustomization: str, kind: str, name: str) -> dict:
    (document,) = [d for d in of_kind(kustomization, kind) if d["metadata"]["name"] == name]
    return document


def test_inference_pools_are_in_the_gateway_overlays():
    with_pools = [k for k in KUSTOMIZATIONS if any(d.get("apiVersion") == INFERENCE_POOL_API_VERSION
                                                   for d in rendered(k))]
    assert with_pools == GATEWAY_KUSTOMIZATIONS


def serving_pods(kustomization: str) -> list[Pod]:
    return [pod for pod in pods(kustomization) if pod.flint_containers() and pod.role != "worker"]


def endpoint_picker(kustomization: str, pool: dict) -> tuple[Pod, dict, dict]:
    """The pod, container and flags (--name: value, defaults filled in) of the pool's EPP."""
    service = named(kustomization, "Service", pool["spec"]["endpointPickerRef"]["name"])
    (pod,) = selected(service["spec"]["selector"], kustomization)
    (container,) = pod.spec["containers"]
    flags = dict(EPP_FLAG_DEFAULTS)
    for argument in [*container.get("command", [])[1:], *container.get("args", [])]:
        assert argument.startswith("--") and "=" in argument, f"{pod.source}: write EPP flags as --flag=value"
        name, value = argument[2:].split("=", 1)
        assert name in EPP_FLAGS, f"{pod.source}: the EPP has no flag --{name}"
        kind = EPP_FLAGS[name]
        assert kind is not bool or value in ("true", "false"), f"{pod.source}: --{name}={value} is not a bool"
        flags[name] = {int: int, bool: lambda text: text == "true", str: str}[kind](value)
    return pod, container, flags


def container_ports(container: dict) -> dict[str | None, int]:
    return {port.get("name"): port["containerPort"] for port in container.get("ports", [])}


@pytest.mark.parametrize("kustomization", GATEWAY_KUSTOMIZATIONS)
def test_pool_selects_the_serving_pods_on_their_port(kustomization):
    (pool,) = of_kind(kustomization, "InferencePool")
    selector = pool["spec"]["selector"]["matchLabels"]
    members = selected(selector, kustomization)
    assert members and {pod.source for pod in members} == {pod.source for pod in serving_pods(kustomization)}, (
        f"InferencePool selects {[pod.source for pod in members]}, not exactly the pods serving the API")
    target_ports = [port["number"] for port in pool["spec"]["targetPorts"]]
    for pod in members:
        (container,) = pod.flint_containers()
        assert target_ports == [port_flag(pod, container)], f"{pod.source}: `flint serve` listens on another port"
        assert not any(label in pod.labels for label in ENGINE_LABELS), (
            f"{pod.source}: an engine-type label overrides the EPP's defaultEngine")


@pytest.mark.parametrize("kustomization", GATEWAY_KUSTOMIZATIONS)
def test_endpoint_picker_serves_its_pool(kustomization):
    (pool,) = of_kind(kustomization, "InferencePool")
    reference = pool["spec"]["endpointPickerRef"]
    assert reference.get("kind", "Service") == "Service" and reference.get("group", "") == ""
    service = named(kustomization, "Service", reference["name"])
    pod, container, flags = endpoint_picker(kustomization, pool)
    (service_port,) = [port for port in service["spec"]["ports"] if port["port"] == reference["port"]["number"]]
    target = service_port["targetPort"]
    assert container_ports(container).get(target, target) == flags["grpc-port"], (
        f"Service {service['metadata']['name']} sends ext_proc where the EPP does not listen")
    assert flags["pool-name"] == pool["metadata"]["name"]
    assert flags["pool-group"] == INFERENCE_POOL_API_VERSION.split("/")[0]
    namespace = {variable["name"]: variable.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath")
                 for variable in container.get("env", [])}.get("NAMESPACE")
    assert "pool-namespace" in flags or namespace == "metadata.namespace", (
        f"{pod.source}: neither --pool-namespace nor NAMESPACE from the pod: the EPP looks in `default`")
    ports = set(container_ports(container).values())
    assert {flags["grpc-port"], flags["grpc-health-port"], flags["metrics-port"]} <= ports, pod.source
    for probe in ("readinessProbe", "livenessProbe"):
        assert container[probe]["grpc"]["port"] == flags["grpc-health-port"], f"{pod.source}: {probe}"
    # The ext_proc stream of a request lasts as long as its response: the picker must outlast
    # the longest drain among the pods it routes to.
    longest = max(member.spec["terminationGracePeriodSeconds"] for member in serving_pods(kustomization))
    assert pod.spec["terminationGracePeriodSeconds"] >= longest, f"{pod.source}: killed before flint drains"


@pytest.mark.parametrize("kustomization", GATEWAY_KUSTOMIZATIONS)
def test_endpoint_picker_may_read_what_it_watches(kustomization):
    (pool,) = of_kind(kustomization, "InferencePool")
    pod, _, _ = endpoint_picker(kustomization, pool)
    account = pod.spec["serviceAccountName"]
    named(kustomization, "ServiceAccount", account)
    granted = set()
    for binding in of_kind(kustomization, "RoleBinding"):
        if any(s["kind"] == "ServiceAccount" and s["name"] == account for s in binding["subjects"]):
            role = named(kustomization, binding["roleRef"]["kind"], binding["roleRef"]["name"])
            granted |= {(group, resource, verb) for rule in role["rules"] for group in rule["apiGroups"]
                        for resource in rule["resources"] for verb in rule["verbs"]}
    for group, resource in (("", "pods"), (INFERENCE_POOL_API_VERSION.split("/")[0], "inferencepools")):
        for verb in ("get", "list", "watch"):
            assert (group, resource, verb) in granted, f"ServiceAccount {account} may not {verb} {resource}"


def epp_config(kustomization: str) -> tuple[dict, dict]:
    """The EPP's flags and its configuration, read from the ConfigMap file --config-file names."""
    (pool,) = of_kind(kustomization, "InferencePool")
    pod, container, flags = endpoint_picker(kustomization, pool)
    path = PurePosixPath(flags["config-file"])
    (mount,) = [m for m in container.get("volumeMounts", []) if PurePosixPath(m["mountPath"]) == path.parent]
    (volume,) = [v for v in pod.spec["volumes"] if v["name"] == mount["name"]]
    config_map = named(kustomization, "ConfigMap", volume["configMap"]["name"])
    assert path.name in config_map["data"], f"{pod.source}: --config-file {path} is not in the ConfigMap"
    return flags, yaml.safe_load(config_map["data"][path.name])


def config_errors(config: dict) -> list[str]:
    return [f"{'.'.join(map(str, e.path))}: {e.message}"
            for e in jsonschema.Draft202012Validator(ENDPOINT_PICKER_CONFIG).iter_errors(config)]


def test_config_schema_refuses_a_misspelled_field():
    _, config = epp_config("deploy/gateway")
    for plugin in config["plugins"]:
        if plugin["type"] == "session-affinity-filter":
            plugin["parameters"]["sessionIdConfig"]["source"] = plugin["parameters"]["sessionIdConfig"].pop("sources")
    assert config_errors(config)
    _, config = epp_config("deploy/gateway")
    config["schedulingProfile"] = config.pop("schedulingProfiles")
    assert config_errors(config)


@pytest.mark.parametrize("kustomization", GATEWAY_KUSTOMIZATIONS)
def test_endpoint_picker_config_is_what_the_epp_decodes(kustomization):
    flags, config = epp_config(kustomization)
    errors = config_errors(config)
    assert not errors, errors
    names = [plugin.get("name", plugin["type"]) for plugin in config["plugins"]]
    assert len(names) == len(set(names)), f"plugins named twice: {names}"
    references = [entry["pluginRef"] for profile in config["schedulingProfiles"] for entry in profile["plugins"]]
    references += [entry["pluginRef"] for entry in config.get("requestHandler", {}).get("parsers", [])]
    for source in config.get("dataLayer", {}).get("sources", []):
        references += [source["pluginRef"], *(extractor["pluginRef"] for extractor in source["extractors"])]
    assert set(references) <= set(names), f"references to no plugin: {set(references) - set(names)}"
    alpha = {plugin["type"] for plugin in config["plugins"]} & ALPHA_PLUGINS
    assert not alpha or flags.get("allow-experimental-plugins"), (
        f"{alpha} are Alpha plugins: the EPP refuses them without --allow-experimental-plugins")


def flint_metrics() -> dict[str, list[dict[str, str]]]:
    """What Flint's /metrics exposes: each sample name with the label sets it has."""
    # Imported here: api.server.metrics brings in the engine (jax), seconds the other tests need not wait.
    from prometheus_client.parser import text_string_to_metric_families

    from api.server.metrics import Metrics
    from engine.engine import EngineStats

    text = Metrics("served-model").render(EngineStats(num_running=1, num_waiting=2, kv_cache_usage=0.5)).decode()
    samples: dict[str, list[dict[str, str]]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples.setdefault(sample.name, []).append(sample.labels)
    return samples


def parse_spec(spec: str) -> tuple[str, dict[str, str]]:
    """The EPP's metric specification, "name" or "name{label=value,...}"."""
    name, _, labels = spec.partition("{")
    pairs = [pair.split("=", 1) for pair in labels.rstrip("}").split(",") if pair.strip()]
    return name.strip(), {key.strip(): value.strip().strip('"') for key, value in pairs}


@pytest.mark.parametrize("kustomization", GATEWAY_KUSTOMIZATIONS)
def test_endpoint_picker_reads_metrics_flint_exports(kustomization):
    _, config = epp_config(kustomization)
    plugins = {plugin["type"]: plugin.get("parameters", {}) for plugin in config["plugins"]}
    source = plugins["metrics-data-source"]
    assert source.get("path", "/metrics") == "/metrics", "Flint serves its metrics on /metrics"
    extractor = plugins["core-metrics-extractor"]
    engines = {engine["name"]: engine for engine in extractor.get("engineConfigs", [])}
    engine = engines.get(extractor.get("defaultEngine", "vllm"))
    assert engine, "the engine Flint's pods get has no engineConfig here (the built-in ones want metrics it lacks)"
    exported = flint_metrics()
    for field in METRIC_SPECS:
        if engine.get(field):  # "" switches a metric off; left out, the EPP would not know it either
            name, labels = parse_spec(engine[field])
            assert any(labels.items() <= sample.items() for sample in exported.get(name, [])), (
                f"{field}: Flint exports no {engine[field]}")
    for scorer, field in SCORER_METRICS.items():
        assert scorer not in plugins or engine.get(field), f"{scorer} ranks pods by {field}, which is off"


@pytest.mark.parametrize("kustomization", GATEWAY_KUSTOMIZATIONS)
def test_session_headers_pin_a_replica(kustomization):
    _, config = epp_config(kustomization)
    (affinity,) = [plugin for plugin in config["plugins"] if plugin["type"] == "session-affinity-filter"]
    parameters = affinity["parameters"]
    assert parameters["strategy"] == "session_id", "a client-chosen session id, not the EPP's own token"
    headers = [source["header"] for source in parameters["sessionIdConfig"]["sources"] if "header" in source]
    assert headers[:len(SESSION_HEADERS)] == SESSION_HEADERS
    name = affinity.get("name", affinity["type"])
    for profile in config["schedulingProfiles"]:
        assert name in [entry["pluginRef"] for entry in profile["plugins"]], (
            f"scheduling profile {profile['name']} does not apply {name}")


def api_prefixes() -> tuple[str, ...]:
    """api/server/app.py's API_PREFIXES, read from the source (importing the app loads the engine)."""
    module = ast.parse((ROOT / "api" / "server" / "app.py").read_text())
    (value,) = [node.value for node in module.body if isinstance(node, ast.Assign)
                and any(getattr(target, "id", None) == "API_PREFIXES" for target in node.targets)]
    return ast.literal_eval(value)


@pytest.mark.parametrize("kustomization", GATEWAY_KUSTOMIZATIONS)
def test_route_sends_the_api_to_the_pool(kustomization):
    pools = {pool["metadata"]["name"] for pool in of_kind(kustomization, "InferencePool")}
    (route,) = of_kind(kustomization, "HTTPRoute")
    assert route["spec"].get("parentRefs"), "the route is attached to no Gateway"
    for rule in route["spec"]["rules"]:
        for backend in rule["backendRefs"]:
            assert (backend.get("group"), backend.get("kind")) == (INFERENCE_POOL_API_VERSION.split("/")[0],
                                                                   "InferencePool"), backend
            assert backend["name"] in pools, f"the route sends to InferencePool {backend['name']}, not one here"
        paths = [match["path"] for match in rule["matches"]]
        assert {path.get("type") for path in paths} == {"PathPrefix"}
        assert sorted(path["value"] for path in paths) == sorted(api_prefixes()), "not Flint's API prefixes"
        assert rule.get("timeouts", {}).get("request"), "no request timeout: the gateway's default cuts streams"
