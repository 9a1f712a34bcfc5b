"""An example of a user's own tool registered through gin (docs/OWN_DATA.md).

  PYTHONPATH=. python launch/tpu_run.py --slice=all --config=configs/local_demo.py:natural \
      --gin_file=configs/examples/my_tools.gin

`unit_convert_tool` is a factory: gin calls it (no arguments) and adds the `Tool` it
returns to the agent named in the binding: its system prompt lists the tool, its calls
are checked against the JSON schema below and executed like the built-in tools.
"""

import gin

from mgrpo_jax.tools import Tool, ToolResult

# How many of the base unit (metre, kilogram, second) one unit is.
_UNITS = {
  "length": {"mm": 0.001, "cm": 0.01, "m": 1.0, "km": 1000.0, "in": 0.0254, "ft": 0.3048,
             "yd": 0.9144, "mi": 1609.344},
  "mass": {"g": 0.001, "kg": 1.0, "t": 1000.0, "oz": 0.028349523125, "lb": 0.45359237},
  "time": {"s": 1.0, "min": 60.0, "h": 3600.0, "day": 86400.0, "week": 604800.0},
}
_KIND = {unit: kind for kind, units in _UNITS.items() for unit in units}


def unit_convert(value: float, from_unit: str, to_unit: str) -> ToolResult:
  """`value` in `from_unit` expressed in `to_unit`; an error observation, never an
  exception, for an unknown unit or units of different kinds."""
  source, target = _KIND.get(from_unit), _KIND.get(to_unit)
  if source is None or target is None:
    unknown = from_unit if source is None else to_unit
    return ToolResult(ok=False, text=f"error: unknown unit {unknown!r}; units: "
                      f"{', '.join(_KIND)}")
  if source != target:
    return ToolResult(ok=False, text=f"error: cannot convert {source} ({from_unit}) to "
                      f"{target} ({to_unit})")
  result = value * _UNITS[source][from_unit] / _UNITS[target][to_unit]
  return ToolResult(ok=True, text=f"{value:g} {from_unit} = {result:.6g} {to_unit}")


@gin.configurable
def unit_convert_tool() -> Tool:
  """The `unit_convert` tool: its name, the description the agent reads, and the JSON
  schema of its arguments."""
  return Tool(
    "unit_convert",
    "Convert a length, mass or time between units, e.g. 3 mi to km.",
    {"type": "object",
     "properties": {"value": {"type": "number"}, "from_unit": {"type": "string"},
                    "to_unit": {"type": "string"}},
     "required": ["value", "from_unit", "to_unit"]},
    unit_convert)
