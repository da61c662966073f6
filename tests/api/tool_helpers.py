"""The tools the tool-calling tests of every dialect offer the tiny random model: argument
schemas bounded (enums, bounded integers, no extra properties), so that a random walk
through them ends well within the token limit."""

from __future__ import annotations

WEATHER = {"type": "object", "properties": {"unit": {"enum": ["c", "f"]},
                                            "days": {"type": "integer", "minimum": 1, "maximum": 7}},
           "required": ["unit", "days"], "additionalProperties": False}
TIME = {"type": "object", "properties": {"zone": {"enum": ["utc", "cet", "pst"]}}, "required": ["zone"],
        "additionalProperties": False}
SCHEMAS = {"get_weather": WEATHER, "get_time": TIME}
