"""What a PromQL expression reads, parsed by promql-parser (the Rust parser's Python binding):
the series it selects, the labels it groups and matches by, the counters it takes rates of,
and the labels its result carries. Grafana's interval variables are replaced first; its other
variables may stand only inside label values, where they are plain strings to the parser."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import promql_parser as promql

# Grafana's built-in range variables, which stand where PromQL wants a duration.
GRAFANA_RANGES = re.compile(r"\$(__rate_interval|__interval|__range)\b|\$\{(__rate_interval|__interval|__range)\}")
# Functions whose argument must be a counter: of anything else the result means nothing.
COUNTER_FUNCTIONS = {"rate", "irate", "increase", "resets"}


@dataclass(frozen=True)
class Selector:
    """One series selector: the metric name and its matchers as (label, operator, value)."""

    name: str
    matchers: tuple[tuple[str, str, str], ...]


def parse(expr: str) -> promql.Expr:
    """The expression's syntax tree (ValueError on a syntax error)."""
    return promql.parse(GRAFANA_RANGES.sub("5m", expr))


def nodes(tree: promql.Expr) -> list[promql.Expr]:
    """Every node of the tree, depth first."""
    found: list[promql.Expr] = []
    promql.walk(tree, lambda node: found.append(node))
    return found


def selectors(tree: promql.Expr) -> list[Selector]:
    """Every series selector in the tree, a matrix's included."""
    return [Selector(node.name, tuple((matcher.name, str(matcher.op).removeprefix("MatchOp."), matcher.value)
                                      for matcher in node.matchers.matchers))
            for node in nodes(tree) if isinstance(node, promql.VectorSelector)]


def groupings(tree: promql.Expr) -> Iterator[tuple[str, list[str], list[Selector]]]:
    """Each label list that groups or matches series (`by`, `without`, `on`, `ignoring`,
    `group_left`/`group_right`), with the selectors whose series it applies to."""
    for node in nodes(tree):
        if isinstance(node, promql.AggregateExpr) and node.modifier is not None:
            yield str(node), list(node.modifier.labels), selectors(node.expr)
        if isinstance(node, promql.BinaryExpr) and node.modifier is not None:
            under = selectors(node.lhs) + selectors(node.rhs)
            if node.modifier.matching is not None:
                yield str(node), list(node.modifier.matching.labels), under
            if node.modifier.group_labels:
                yield str(node), list(node.modifier.group_labels), under


def counter_arguments(tree: promql.Expr) -> Iterator[tuple[str, Selector]]:
    """Each (function, selector) where a counter function takes the selector's range."""
    for node in nodes(tree):
        if isinstance(node, promql.Call) and node.func.name in COUNTER_FUNCTIONS:
            for argument in node.args:
                for selector in selectors(argument):
                    yield node.func.name, selector


def result_labels(tree: promql.Expr, labels_of: Callable[[str], set[str]]) -> set[str]:
    """The labels the expression's result series carry, given `labels_of(metric name)`: what
    a legend or an alert's annotations may name."""
    if isinstance(tree, promql.VectorSelector):
        return labels_of(tree.name)
    if isinstance(tree, promql.MatrixSelector):
        return result_labels(tree.vector_selector, labels_of)
    if isinstance(tree, promql.AggregateExpr):
        return aggregated_labels(tree, labels_of)
    if isinstance(tree, promql.BinaryExpr):
        return binary_labels(tree, labels_of)
    if isinstance(tree, promql.Call):
        vectors = [result_labels(argument, labels_of) for argument in tree.args]
        labels = set().union(*vectors)
        return labels - {"le"} if tree.func.name == "histogram_quantile" else labels
    if isinstance(tree, (promql.ParenExpr, promql.UnaryExpr, promql.SubqueryExpr)):
        return result_labels(tree.expr, labels_of)
    return set()  # a number or a string


def aggregated_labels(tree: promql.AggregateExpr, labels_of: Callable[[str], set[str]]) -> set[str]:
    modifier = tree.modifier
    if modifier is None:
        return set()
    if modifier.type == promql.AggModifierType.By:
        return set(modifier.labels)
    return result_labels(tree.expr, labels_of) - set(modifier.labels)


def binary_labels(tree: promql.BinaryExpr, labels_of: Callable[[str], set[str]]) -> set[str]:
    left, right = result_labels(tree.lhs, labels_of), result_labels(tree.rhs, labels_of)
    operator = str(tree.op)
    if not left or not right:  # a vector and a number: the vector's labels
        return left or right
    if operator == "or":  # the series of either side
        return left | right
    modifier = tree.modifier
    if operator in ("and", "unless") or modifier is None:
        return left
    # group_left keeps the left side's labels and adds the named ones of the right; group_right
    # the other way round; a one-to-one `on` match keeps only the `on` labels.
    if modifier.card == promql.VectorMatchCardinality.ManyToOne:
        return left | set(modifier.group_labels)
    if modifier.card == promql.VectorMatchCardinality.OneToMany:
        return right | set(modifier.group_labels)
    matching = modifier.matching
    return set(matching.labels) if matching is not None and matching.type == promql.LabelModifierType.Include else left
