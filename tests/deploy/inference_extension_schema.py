"""JSON schemas of the APIs deploy/gateway uses beyond the core ones, written for the tests
from their published definitions (kubernetes-validate knows only the core API, and the tests
download nothing):

- InferencePool (inference.networking.k8s.io/v1): the openAPIV3Schema of the CRD in the Gateway
  API Inference Extension's v1.5.0 release (config/crd/bases), CEL rules written as JSON schema
  where they can be.
- HTTPRoute (gateway.networking.k8s.io/v1): Gateway API v1.5.1's standard-channel CRD, only the
  fields a route to an InferencePool needs; a field not written here is refused until it is.
- EndpointPickerConfig (llm-d.ai/v1alpha1): the EPP's configuration file, from llm-d-router
  v0.10.0's Go types (apix/config/v1alpha1). The EPP decodes it strictly, and each plugin's
  parameters too, so every object is closed; PLUGIN_PARAMETERS has the parameters of the
  plugin types deploy/ uses, and a type not in it is refused until its parameters are added.

The structural CRDs would prune an unknown field rather than refuse it; kubectl's strict field
validation (its default) refuses it, so the schemas do too."""

from __future__ import annotations

from leaderworkerset_schema import closed

INFERENCE_POOL_API_VERSION = "inference.networking.k8s.io/v1"
HTTP_ROUTE_API_VERSION = "gateway.networking.k8s.io/v1"
EPP_CONFIG_API_VERSION = "llm-d.ai/v1alpha1"  # inference.networking.x-k8s.io/v1alpha1 is deprecated

DNS_LABEL = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
DNS_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
GROUP = {"type": "string", "maxLength": 253, "pattern": r"^$|" + DNS_SUBDOMAIN}
KIND = {"type": "string", "minLength": 1, "maxLength": 63, "pattern": r"^[a-zA-Z]([-a-zA-Z0-9]*[a-zA-Z0-9])?$"}
PORT_NUMBER = {"type": "integer", "minimum": 1, "maximum": 65535}
LABEL_VALUE = {"type": "string", "maxLength": 63, "pattern": r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$"}
METADATA = {"type": "object", "required": ["name"], "properties": {
    "name": {"type": "string", "maxLength": 253, "pattern": DNS_SUBDOMAIN}}}


def resource(api_version: str, kind: str, spec: dict) -> dict:
    return closed({"apiVersion": {"const": api_version}, "kind": {"const": kind}, "metadata": METADATA, "spec": spec},
                  required=("apiVersion", "kind", "metadata", "spec"))


INFERENCE_POOL = resource(INFERENCE_POOL_API_VERSION, "InferencePool", closed({
    # Labels only (no matchExpressions): the pods the gateway may send the pool's requests to.
    "selector": closed({"matchLabels": {"type": "object", "minProperties": 1, "maxProperties": 64,
                                        "additionalProperties": LABEL_VALUE}}, required=("matchLabels",)),
    # The model servers' ports; the EPP scrapes metrics on the first. Unique (a CEL rule).
    "targetPorts": {"type": "array", "minItems": 1, "maxItems": 8, "uniqueItems": True,
                    "items": closed({"number": PORT_NUMBER}, required=("number",))},
    "appProtocol": {"enum": ["http", "kubernetes.io/h2c"]},
    "endpointPickerRef": {**closed({
        "group": GROUP,
        "kind": KIND,  # "Service" when left out
        "name": {"type": "string", "minLength": 1, "maxLength": 253},
        "port": closed({"number": PORT_NUMBER}, required=("number",)),
        "failureMode": {"enum": ["FailOpen", "FailClose"]},  # FailClose when left out
    }, required=("name",)),
        # CEL: a Service (the default kind) needs its port.
        "if": {"properties": {"kind": {"const": "Service"}}}, "then": {"required": ["port"]}},
}, required=("selector", "targetPorts", "endpointPickerRef")))

DURATION = {"type": "string", "pattern": r"^([0-9]{1,5}(h|m|s|ms)){1,4}$"}
PATH_MATCH = closed({"type": {"enum": ["Exact", "PathPrefix", "RegularExpression"]},
                     "value": {"type": "string", "maxLength": 1024}})
HEADER_MATCH = closed({"type": {"enum": ["Exact", "RegularExpression"]},
                       "name": {"type": "string", "minLength": 1, "maxLength": 256,
                                "pattern": r"^[A-Za-z0-9!#$%&'*+\-.^_`|~]+$"},
                       "value": {"type": "string", "minLength": 1, "maxLength": 4096}}, required=("name", "value"))
BACKEND_REF = {**closed({
    "group": GROUP,  # "" (core) when left out
    "kind": KIND,  # "Service" when left out
    "name": {"type": "string", "minLength": 1, "maxLength": 253},
    "namespace": {"type": "string", "minLength": 1, "maxLength": 63, "pattern": DNS_LABEL},
    "port": PORT_NUMBER,
    "weight": {"type": "integer", "minimum": 0, "maximum": 1000000},
}, required=("name",)),
    # CEL: a core Service needs its port (an InferencePool has its own targetPorts).
    "if": {"properties": {"group": {"const": ""}, "kind": {"const": "Service"}}},
    "then": {"required": ["port"]}}
HTTP_ROUTE = resource(HTTP_ROUTE_API_VERSION, "HTTPRoute", closed({
    "parentRefs": {"type": "array", "maxItems": 32, "items": closed({
        "group": GROUP, "kind": KIND,  # gateway.networking.k8s.io/Gateway when left out
        "name": {"type": "string", "minLength": 1, "maxLength": 253},
        "namespace": {"type": "string", "minLength": 1, "maxLength": 63, "pattern": DNS_LABEL},
        "sectionName": {"type": "string", "minLength": 1, "maxLength": 253, "pattern": DNS_SUBDOMAIN},
        "port": PORT_NUMBER,
    }, required=("name",))},
    "hostnames": {"type": "array", "maxItems": 16, "items": {
        "type": "string", "minLength": 1, "maxLength": 253,
        "pattern": r"^(\*\.)?[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"}},
    "rules": {"type": "array", "minItems": 1, "maxItems": 16, "items": closed({
        "name": {"type": "string", "minLength": 1, "maxLength": 253, "pattern": DNS_SUBDOMAIN},
        "matches": {"type": "array", "maxItems": 64, "items": closed({
            "path": PATH_MATCH,
            "headers": {"type": "array", "maxItems": 16, "items": HEADER_MATCH},
            "method": {"enum": ["GET", "HEAD", "POST", "PUT", "DELETE", "CONNECT", "OPTIONS", "TRACE", "PATCH"]},
        })},
        "backendRefs": {"type": "array", "maxItems": 16, "items": BACKEND_REF},
        # CEL (backendRequest <= request) is left to the API server.
        "timeouts": closed({"request": DURATION, "backendRequest": DURATION}),
    })},
}))

# --- The EPP's configuration file -----------------------------------------------------------

PLUGIN_REF = closed({"pluginRef": {"type": "string", "minLength": 1}}, required=("pluginRef",))
METRIC_SPEC = {"type": "string"}  # "name" or "name{label=value,...}"; "" switches the metric off

# Each plugin type's parameters as its factory decodes them (json.Decoder with
# DisallowUnknownFields); None for a factory that takes none.
PLUGIN_PARAMETERS: dict[str, dict | None] = {
    # pkg/epp/framework/plugins/datalayer/source/metrics: the scrape of each pod's metrics.
    "metrics-data-source": closed({
        "scheme": {"enum": ["http", "https"]},
        "path": {"type": "string", "pattern": "^/"},
        "port": PORT_NUMBER,  # the pool's first target port when left out
        "insecureSkipVerify": {"type": "boolean"},
        "caCertPath": {"type": "string"},
        "clientCertPath": {"type": "string"},
        "clientKeyPath": {"type": "string"},
        "interval": {"type": "string", "pattern": r"^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$"},  # Go duration
    }),
    # .../datalayer/extractor/metrics: metric names per engine (the model server protocol).
    "core-metrics-extractor": closed({
        "engineLabelKey": {"type": "string"},
        "defaultEngine": {"type": "string", "minLength": 1},
        "engineConfigs": {"type": "array", "items": closed({
            "name": {"type": "string", "minLength": 1, "not": {"const": "default"}},  # "default" is reserved
            "queuedRequestsSpec": METRIC_SPEC,
            "runningRequestsSpec": METRIC_SPEC,
            "kvUsageSpec": METRIC_SPEC,
            "loraSpec": METRIC_SPEC,
            "cacheInfoSpec": METRIC_SPEC,
            "cacheBlockSizeLabelName": {"type": "string"},
            "cacheNumBlocksLabelName": {"type": "string"},
            "cacheBlockSizeSpec": METRIC_SPEC,
            "cacheNumBlocksSpec": METRIC_SPEC,
            "customMetrics": {"type": "array", "items": closed({
                "attributeKey": {"type": "string", "minLength": 1}, "metricSpec": METRIC_SPEC})},
        }, required=("name",))},
    }),
    # .../scheduling/filter/sessionaffinity: pins a session to the pod it was first sent to.
    "session-affinity-filter": closed({
        "strategy": {"enum": ["encoded_endpoint_header", "session_id"]},
        "profileName": {"type": "string"},
        "encodedEndpointHeaderConfig": closed({"header": {"type": "string"}}),
        "sessionIdConfig": closed({
            # Each source exactly one of a request header or a request attribute.
            "sources": {"type": "array", "items": {"oneOf": [
                closed({"header": {"type": "string", "minLength": 1}}, required=("header",)),
                closed({"attribute": {"type": "string", "minLength": 1}}, required=("attribute",))]}},
            "evictionTtlSeconds": {"type": "number", "exclusiveMinimum": 0},
            "evictionSweepSeconds": {"type": "number", "exclusiveMinimum": 0},
        }),
    }),
    "prefix-cache-scorer": closed({
        "prefixMatchInfoProducerName": {"type": "string"},
        "matchLengthWeight": {"type": "number", "minimum": 0, "maximum": 1},
        "matchLengthScaleTokens": {"type": "integer", "minimum": 1},
    }),
    "queue-scorer": None,
    "kv-cache-utilization-scorer": None,
    "openai-parser": None,
    "anthropic-parser": None,
    "passthrough-parser": None,
}
# Plugins registered as Alpha: the EPP loads them only with --allow-experimental-plugins.
ALPHA_PLUGINS = {"session-affinity-filter", "session-affinity-scorer"}


def plugin_spec(plugin_type: str, parameters: dict | None) -> dict:
    properties = {"name": {"type": "string"}, "type": {"const": plugin_type}}
    if parameters is not None:
        properties["parameters"] = parameters
    return closed(properties, required=("type",))


ENDPOINT_PICKER_CONFIG = closed({
    "apiVersion": {"const": EPP_CONFIG_API_VERSION},
    "kind": {"const": "EndpointPickerConfig"},
    "featureGates": {"type": "array", "items": {"type": "string"}},
    # Each entry checked against its own type's spec (if/then rather than oneOf: an error names
    # the field at fault, not every type the entry is not).
    "plugins": {"type": "array", "items": {
        "type": "object", "required": ["type"], "properties": {"type": {"enum": list(PLUGIN_PARAMETERS)}},
        "allOf": [{"if": {"properties": {"type": {"const": plugin_type}}}, "then": plugin_spec(plugin_type, parameters)}
                  for plugin_type, parameters in PLUGIN_PARAMETERS.items()]}},
    "schedulingProfiles": {"type": "array", "items": closed({
        "name": {"type": "string", "minLength": 1},
        "plugins": {"type": "array", "items": closed({"pluginRef": {"type": "string", "minLength": 1},
                                                      "weight": {"type": "number"}}, required=("pluginRef",))},
    }, required=("name", "plugins"))},
    "dataLayer": closed({
        "injectDefaults": {"type": "boolean"},
        "sources": {"type": "array", "items": closed({
            "pluginRef": {"type": "string", "minLength": 1},
            "extractors": {"type": "array", "items": PLUGIN_REF}}, required=("pluginRef", "extractors"))},
        "discovery": PLUGIN_REF,
        "crossReplicaSyncerPluginRef": {"type": "string"},
        "crossReplicaSyncInterval": {"type": "string"},
    }),
    "requestHandler": closed({"parsers": {"type": "array", "items": PLUGIN_REF}}),
    # flowControl (priorities, with the flowControl feature gate) is not used in deploy/.
}, required=("apiVersion", "kind", "plugins", "schedulingProfiles"))

# The EPP's command-line flags (pkg/epp/server/options.go, and the logging flags), by the kind
# of value pflag parses; the deprecated metric-name flags are refused by the EPP itself.
EPP_FLAGS = {
    "grpc-port": int, "grpc-health-port": int, "metrics-port": int, "ha-enable-leader-election": bool,
    "drain-timeout": str, "grpc-max-recv-msg-size": str, "grpc-max-send-msg-size": str,
    "pool-group": str, "pool-namespace": str, "pool-name": str,
    "endpoint-selector": str, "endpoint-target-ports": str, "disable-endpoint-subset-filter": bool,
    "emit-endpoint-scores": bool, "refresh-metrics-interval": str, "refresh-prometheus-metrics-interval": str,
    "metrics-staleness-threshold": str, "tracing": bool, "health-checking": bool, "enable-pprof": bool,
    "cert-path": str, "enable-cert-reload": bool, "enable-grpc-stream-metrics": bool, "secure-serving": bool,
    "tls-min-version": str, "tls-cipher-suites": str, "metrics-endpoint-auth": bool, "metrics-client-ca-file": str,
    "metrics-cert-dir": str, "config-file": str, "config-text": str, "allow-experimental-plugins": bool,
    "v": int, "zap-encoder": str, "zap-log-level": str, "zap-devel": bool, "zap-stacktrace-level": str,
    "zap-time-encoding": str,
}
EPP_FLAG_DEFAULTS = {"grpc-port": 9002, "grpc-health-port": 9003, "metrics-port": 9090,
                     "pool-group": "inference.networking.k8s.io"}
