"""deploy/grafana/flint.json and deploy/prometheus/flint-rules.yaml against a live Flint: every
PromQL expression parses, and every metric it names, every label it matches, groups or shows,
and every counter it takes a rate of, is on a tiny-model server's /metrics after a few
requests. Also the dashboard's and the rule file's own structure, and, where promtool is
installed, Prometheus's own check of the rules and the alerts' unit tests
(flint-rules.test.yaml beside this file). Without promtool those two skip, unless
$FLINT_TEST_PROMTOOL_REQUIRED is set: `.ci/run` installs Debian's prometheus package and sets
it, so in CI a missing promtool fails the run instead of skipping them."""

from __future__ import annotations

import copy
import json
import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import httpx
import promql_parser
import pytest
import yaml
from api_helpers import ONE_BUCKET_ENGINE, live_app
from prometheus_client.parser import text_string_to_metric_families
from promql_reads import Selector, counter_arguments, groupings, parse, result_labels, selectors
from tiny_models import tiny_checkpoint

from tests.engine.bert_reference import write_sentence_transformer

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "deploy" / "grafana" / "flint.json"
RULES = ROOT / "deploy" / "prometheus" / "flint-rules.yaml"
RULES_TESTS = Path(__file__).with_name("flint-rules.test.yaml")
# Labels Prometheus gives every series it scrapes, and the series it makes for each target.
TARGET_LABELS = {"job", "instance"}
SCRAPE_SERIES = {"up": TARGET_LABELS}
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
GRAFANA_VARIABLE = re.compile(r"\$\{?(\w+)\}?")
LEGEND_LABEL = re.compile(r"\{\{\s*(\w+)\s*\}\}")
ANNOTATION_LABEL = re.compile(r"\$labels\.(\w+)")
LABEL_VALUES = re.compile(r"^label_values\((?P<series>.+),\s*(?P<label>\w+)\)$")
RECORD_NAME = re.compile(r"^[a-z_]+:[a-z0-9_]+:[a-z0-9_]+$")  # level:metric:operations
SEVERITIES = {"critical", "warning", "info"}
PROMTOOL_REQUIRED = "FLINT_TEST_PROMTOOL_REQUIRED"
GRID_WIDTH = 24  # Grafana's columns


@dataclass
class Exported:
    """What a live /metrics exposes, by sample name (`_total`, `_bucket`, ... included)."""

    labels: dict[str, set[str]]
    values: dict[tuple[str, str], set[str]]  # (sample, label): the values seen
    types: dict[str, str]  # sample: its family's type (counter, gauge, histogram, ...)


@dataclass
class Query:
    """One PromQL expression, where it stands and the labels its display names."""

    where: str
    expr: str
    shown: set[str]  # legend {{label}}s, alert annotations' $labels.label


def exported_by(text: str) -> Exported:
    found = Exported({}, {}, {})
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found.labels.setdefault(sample.name, set()).update(sample.labels)
            found.types[sample.name] = family.type
            for label, value in sample.labels.items():
                found.values.setdefault((sample.name, label), set()).add(value)
    return found


def tiny_app(tokenizer, embedder: Path):
    """An app serving the tiny random model, as tests/api/conftest.py's tiny_app_factory makes,
    and the tiny embedder in `embedder` beside it (the encoder metrics' series)."""
    from api.server.app import create_app  # here: the app brings in the engine (jax)
    from api.server.settings import Settings
    from engine.engine import Engine

    checkpoint = tiny_checkpoint(tokenizer.vocab_size)

    def engine_factory(settings: Settings) -> Engine:
        engine = Engine(checkpoint, tokenizer, settings.engine)
        engine.runner.warmup()
        return engine

    # One batch size: the panels read the encoder's metrics, whatever it compiled.
    return create_app(Settings(engine=ONE_BUCKET_ENGINE, embedding_models=(str(embedder),), encoder_row_buckets=(8,)),
                      engine_factory=engine_factory)


@pytest.fixture(scope="module")
def exported(smollm2_tokenizer, tmp_path_factory) -> Exported:
    """A live server's /metrics, after two completions of one prompt (so the histograms and
    the prefix cache have counted something) and an embedding."""
    embedder = tmp_path_factory.mktemp("encoders") / "tiny-embedder"
    write_sentence_transformer(embedder)
    with live_app(tiny_app(smollm2_tokenizer, embedder)) as base_url:
        for _ in range(2):
            response = httpx.post(f"{base_url}/v1/completions", timeout=120,
                                  json={"prompt": "Watch the dashboards", "max_tokens": 4, "ignore_eos": True})
            assert response.status_code == 200, response.text
        response = httpx.post(f"{base_url}/v1/embeddings", timeout=120, json={"model": embedder.name, "input": "a"})
        assert response.status_code == 200, response.text
        scrape = httpx.get(f"{base_url}/metrics", timeout=30)
    assert scrape.status_code == 200
    return exported_by(scrape.text)


def dashboard() -> dict:
    return json.loads(DASHBOARD.read_text())


def rules() -> list[dict]:
    return [rule for group in yaml.safe_load(RULES.read_text())["groups"] for rule in group["rules"]]


def recorded() -> dict[str, str]:
    """The recording rules' names and expressions."""
    return {rule["record"]: rule["expr"] for rule in rules() if "record" in rule}


def panels(board: dict | None = None) -> list[dict]:
    """Every panel of `board` (the dashboard unless given), those inside collapsed rows too."""
    top = (board or dashboard())["panels"]
    return top + [inner for panel in top for inner in panel.get("panels", [])]


def queries(board: dict | None = None) -> list[Query]:
    """Every PromQL expression of the dashboard's panels and variables (of `board` where
    given), and of the rules."""
    found = [Query(f"panel {panel['title']!r} {target['refId']}", target["expr"],
                   set(LEGEND_LABEL.findall(target.get("legendFormat", ""))))
             for panel in panels(board) for target in panel.get("targets", [])]
    for variable in variables(board):
        if variable["type"] == "query":
            run = variable["query"]["query"]  # what Grafana runs; `definition` is what its editor shows
            match = LABEL_VALUES.match(run)
            assert match, f"variable {variable['name']}: not label_values(series, label)"
            assert variable["definition"] == run, f"variable {variable['name']}: its editor shows another query"
            found.append(Query(f"variable {variable['name']}", match["series"], {match["label"]}))
    for rule in rules():
        shown = set(ANNOTATION_LABEL.findall(" ".join(rule.get("annotations", {}).values())))
        found.append(Query(f"rule {rule.get('record') or rule.get('alert')}", rule["expr"], shown))
    return found


def variables(board: dict | None = None) -> list[dict]:
    return (board or dashboard())["templating"]["list"]


def labels_of(exported: Exported):
    """A metric name's labels as Prometheus stores them: the exported ones and the target's;
    for a recording rule, the labels its expression's result keeps."""
    def labels(name: str) -> set[str]:
        if name in exported.labels:
            return exported.labels[name] | TARGET_LABELS
        if name in recorded():
            return result_labels(parse(recorded()[name]), labels)
        return SCRAPE_SERIES.get(name, set())

    return labels


def test_every_expression_parses():
    errors = []
    for query in queries():
        try:
            parse(query.expr)
        except ValueError as error:
            errors.append(f"{query.where}: {error}")
    assert not errors, errors
    assert len(queries()) > 40  # the panels' targets, the variables and the rules were all found


def test_every_metric_named_is_exported(exported):
    known = set(exported.labels) | set(recorded()) | set(SCRAPE_SERIES)
    missing = {f"{query.where}: {selector.name}" for query in queries() for selector in selectors(parse(query.expr))
               if selector.name not in known}
    assert not missing, f"named, but not on a live /metrics nor recorded: {sorted(missing)}"


def alternatives(regex: str) -> list[str]:
    """A regular expression's top-level alternatives (`a|b(c|d)` is `a` and `b(c|d)`)."""
    parts, depth, start = [], 0, 0
    for index, char in enumerate(regex):
        escaped = index > 0 and regex[index - 1] == "\\"
        if char in "([" and not escaped:
            depth += 1
        elif char in ")]" and not escaped:
            depth -= 1
        elif char == "|" and depth == 0 and not escaped:
            parts.append(regex[start:index])
            start = index + 1
    return parts + [regex[start:]]


def matcher_errors(selector: Selector, exported: Exported) -> list[str]:
    """Matchers on labels the series lacks, and matchers whose value no series of it has:
    `label="value"` and `label!="value"` with a value it never has (one that matches nothing,
    or excludes nothing), `label=~"re"` and `label!~"re"` with an alternative of the regular
    expression that matches none of its values (anchored at both ends, as Prometheus anchors
    it). A Grafana variable in the value is the dashboard's choice, not checked here."""
    labels = labels_of(exported)(selector.name)
    errors = []
    for label, operator, value in selector.matchers:
        if label not in labels:
            errors.append(f"{selector.name} has no label {label}")
            continue
        seen = exported.values.get((selector.name, label))
        if "$" in value or seen is None:
            continue
        if operator in ("Equal", "NotEqual") and value and value not in seen:
            sign = "=" if operator == "Equal" else "!="
            errors.append(f"{selector.name}{{{label}{sign}{value!r}}}: no series has that value")
        if operator in ("Re", "NotRe"):
            sign = "=~" if operator == "Re" else "!~"
            errors += [f"{selector.name}{{{label}{sign}{value!r}}}: {part!r} matches no series' value"
                       for part in alternatives(value) if part and not any(re.fullmatch(part, seen_value)
                                                                           for seen_value in seen)]
    return errors


def label_errors(found: list[Query], exported: Exported) -> list[str]:
    return [f"{query.where}: {error}" for query in found for selector in selectors(parse(query.expr))
            for error in matcher_errors(selector, exported)]


def test_every_label_matched_is_on_its_series(exported):
    errors = label_errors(queries(), exported)
    assert not errors, errors


def test_a_matcher_that_matches_nothing_is_found(exported):
    """Each kind of matcher, with a value the server exports and with a misspelt one, on a copy
    of the dashboard: the check finds the misspelt ones and only those."""
    (label, value), *_ = sorted((label, value) for (name, label), values in exported.values.items()
                               if name == "vllm:num_requests_running" for value in values)
    board = dashboard()
    target = board["panels"][1]["targets"][0]
    for operator in ("=", "!=", "=~", "!~"):
        misspelt = "x" + value if "~" not in operator else f"{value}|{value}x"
        for matched, wrong in ((value, False), (misspelt, True)):
            target["expr"] = f'sum(vllm:num_requests_running{{{label}{operator}"{matched}"}})'
            errors = label_errors(queries(board), exported)
            assert bool(errors) == wrong, (target["expr"], errors)


def test_every_grouping_label_is_on_the_series_grouped(exported):
    labels = labels_of(exported)
    errors = []
    for query in queries():
        for clause, names, under in groupings(parse(query.expr)):
            present = set().union(*(labels(selector.name) for selector in under))
            errors += [f"{query.where}: {name!r} in {clause}" for name in names if name not in present]
    assert not errors, f"grouped or matched by labels no series under it has: {errors}"


def test_rates_are_taken_of_counters(exported):
    counted = {name for name, kind in exported.types.items() if kind in ("counter", "histogram")}
    counted -= {name for name in counted if name.endswith("_created")}  # a timestamp, not a count
    wrong = [f"{query.where}: {function}({selector.name})" for query in queries()
             for function, selector in counter_arguments(parse(query.expr)) if selector.name not in counted]
    assert not wrong, f"a rate of what is not a counter (a gauge, or a rate recorded already): {wrong}"


def test_legends_and_annotations_name_labels_of_the_result(exported):
    labels = labels_of(exported)
    wrong = [f"{query.where}: {sorted(query.shown - kept)}" for query in queries()
             if not query.shown <= (kept := result_labels(parse(query.expr), labels))]
    assert not wrong, f"shows labels its result does not carry: {wrong}"


def test_every_recording_rule_is_read():
    read = {selector.name for query in queries() for selector in selectors(parse(query.expr))}
    assert set(recorded()) <= read, f"recorded but read by no panel or alert: {sorted(set(recorded()) - read)}"


def test_panels_have_unique_ids_and_read_the_datasource_variable():
    ids = [panel["id"] for panel in panels()]
    assert len(ids) == len(set(ids)), "panel ids repeat"
    (datasource,) = [variable for variable in variables() if variable["name"] == "datasource"]
    assert (datasource["type"], datasource["query"]) == ("datasource", "prometheus")
    for panel in panels():
        if panel["type"] == "row":
            continue
        targets = panel["targets"]
        assert panel["datasource"] == DATASOURCE, panel["title"]
        assert targets and all(target["datasource"] == DATASOURCE for target in targets), panel["title"]
        assert panel["fieldConfig"]["defaults"].get("unit"), f"{panel['title']} has no unit"


def overlaps(board: dict) -> list[str]:
    """Panels that share a cell, or stand past the grid's right edge: on the dashboard as it
    opens, and in each collapsed row as Grafana lays its panels out when the row opens (moved
    together to just below the row, pushing what is below further down)."""
    def cells(panel: dict) -> set[tuple[int, int]]:
        grid = panel["gridPos"]
        columns, rows = range(grid["x"], grid["x"] + grid["w"]), range(grid["y"], grid["y"] + grid["h"])
        return {(x, y) for x in columns for y in rows}

    def clashes(layout: list[dict]) -> list[str]:
        found, taken = [], {}
        for panel in layout:
            if panel["gridPos"]["x"] + panel["gridPos"]["w"] > GRID_WIDTH:
                found.append(f"{panel['title']!r} is past the grid's right edge")
            for cell in cells(panel):
                if cell in taken:
                    found.append(f"{panel['title']!r} overlaps {taken[cell]!r}")
                    break
                taken[cell] = panel["title"]
        return found

    top = board["panels"]
    found = clashes(top)
    for row in (panel for panel in top if panel["type"] == "row" and panel.get("collapsed")):
        inner = row.get("panels", [])
        if not inner:
            continue
        shift = inner[0]["gridPos"]["y"] - (row["gridPos"]["y"] + row["gridPos"]["h"])
        opened = [{**panel, "gridPos": {**panel["gridPos"], "y": panel["gridPos"]["y"] - shift}} for panel in inner]
        found += [f"in row {row['title']!r}: {clash}" for clash in clashes([row, *opened])]
    return found


def test_panels_do_not_overlap():
    assert not overlaps(dashboard()), overlaps(dashboard())


def collapsed(board: dict, title: str, inner: list[dict]) -> dict:
    """`board` with a collapsed row of `inner` panels added at its foot."""
    bottom = max(panel["gridPos"]["y"] + panel["gridPos"]["h"] for panel in board["panels"])
    row = {"type": "row", "title": title, "collapsed": True, "gridPos": {"x": 0, "y": bottom, "w": 24, "h": 1},
           "panels": inner}
    return {**board, "panels": [*board["panels"], row]}


def test_overlapping_panels_in_a_collapsed_row_are_found():
    """The check looks inside collapsed rows: two panels of one that share cells once it opens
    are found, and the same two side by side are not."""
    template = next(panel for panel in dashboard()["panels"] if panel["type"] != "row")

    def panel(title: str, x: int) -> dict:
        return {**copy.deepcopy(template), "title": title, "gridPos": {"x": x, "y": 100, "w": 12, "h": 8}}

    assert not overlaps(collapsed(dashboard(), "Side by side", [panel("left", 0), panel("right", 12)]))
    clashing = overlaps(collapsed(dashboard(), "On top", [panel("first", 0), panel("second", 6)]))
    assert clashing == ["in row 'On top': 'second' overlaps 'first'"]


def test_every_variable_used_is_defined():
    defined = {variable["name"] for variable in variables()}
    used = {name for query in queries() for name in GRAFANA_VARIABLE.findall(query.expr)
            if not name.startswith("__")} | {"datasource"}
    assert used <= defined, f"undefined variables: {sorted(used - defined)}"
    assert {"model_name", "job", "instance"} <= used


def test_rules_have_the_fields_prometheus_and_alertmanager_need():
    document = yaml.safe_load(RULES.read_text())
    assert set(document) == {"groups"}
    groups = document["groups"]
    assert len({group["name"] for group in groups}) == len(groups)
    names = []
    for rule in (rule for group in groups for rule in group["rules"]):
        assert ("record" in rule) != ("alert" in rule), rule
        names.append(rule.get("record") or rule["alert"])
        if "record" in rule:
            assert set(rule) == {"record", "expr"} and RECORD_NAME.match(rule["record"]), rule
            continue
        assert set(rule) <= {"alert", "expr", "for", "labels", "annotations"}, rule
        assert rule["labels"]["severity"] in SEVERITIES, rule["alert"]
        assert {"summary", "description"} <= set(rule["annotations"]), rule["alert"]
        if "for" in rule:
            promql_parser.parse_duration(rule["for"])
    assert len(names) == len(set(names)), "rule names repeat"
    alerts = set(names) - set(recorded())
    assert {"FlintDown", "FlintEngineFailed", "FlintQueueGrowing", "FlintKVCacheSaturated"} <= alerts


def promtool(*args: str) -> subprocess.CompletedProcess:
    if not shutil.which("promtool"):
        missing = "promtool is not installed (Debian's prometheus package has it)"
        if os.environ.get(PROMTOOL_REQUIRED, "").strip() not in ("", "0"):
            pytest.fail(f"{missing}, and ${PROMTOOL_REQUIRED} is set", pytrace=False)
        pytest.skip(missing)
    return subprocess.run(["promtool", *args], capture_output=True, text=True, timeout=60)


def test_promtool_accepts_the_rules():
    checked = promtool("check", "rules", str(RULES))
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_the_alerts_fire_when_they_should():
    """flint-rules.test.yaml's series through Prometheus's own rule engine."""
    tested = promtool("test", "rules", str(RULES_TESTS))
    assert tested.returncode == 0, tested.stdout + tested.stderr
