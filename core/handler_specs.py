"""Customer handler specs (`CUSTOM_FASTAPI_*_HANDLER`), checked before anything starts.

Inside the server, AWS's model-hosting-container-standards (MHCS) imports the customer script
and the handlers named in `CUSTOM_FASTAPI_PING_HANDLER` / `CUSTOM_FASTAPI_INVOCATION_HANDLER`,
but only once vLLM has loaded the model: a typo there costs a whole model load. These rules find
the common mistakes first (a malformed spec, a missing file, a syntax error, a function the file
does not define) by reading the source, without running any customer code.
"""

import ast
import os
import re
from collections.abc import Callable, Mapping

from vllm_sagemaker.core.env import model_dir

HANDLER_VARIABLES = ("CUSTOM_FASTAPI_PING_HANDLER", "CUSTOM_FASTAPI_INVOCATION_HANDLER")
SCRIPT_VARIABLE = "CUSTOM_SCRIPT_FILENAME"
DEFAULT_SCRIPT = "model.py"
# MHCS's own pattern for a function spec (HandlerSpec.FUNCTION_SPEC_PATTERN).
_FUNCTION_SPEC = re.compile(r"^([^\s:]+):([^\s:]+)$")
# The module name MHCS gives the customer script in a `module:function` spec.
_SCRIPT_MODULE = "model"

# A file's source, or None when there is no such file.
ReadSource = Callable[[str], str | None]


def code_dir(env: Mapping[str, str]) -> str:
    """Where the customer's code and requirements live: SAGEMAKER_MODEL_PATH as MHCS reads it,
    else the model directory."""
    return env.get("SAGEMAKER_MODEL_PATH") or model_dir(env)


def script_path(env: Mapping[str, str]) -> str:
    return os.path.join(code_dir(env), env.get(SCRIPT_VARIABLE) or DEFAULT_SCRIPT)


def spec_problem(
    variable: str, spec: str, env: Mapping[str, str], read: ReadSource | None
) -> str | None:
    """Why the handler spec in `variable` cannot load, or None when it may (a spec naming a
    module other than the script is left to MHCS: finding it would mean importing it). With no
    `read` (the files are out of reach) only the spec's form is checked."""
    spec = spec.strip()
    if not spec or (spec.startswith("/") and ":" not in spec):
        return None
    match = _FUNCTION_SPEC.match(spec)
    if match is None:
        return (
            f"{variable}={spec!r} names no function: write model.py:function (the script), "
            "/absolute/path/file.py:function or package.module:function"
        )
    target, function = match.groups()
    if read is None:
        return None
    if target.endswith(".py"):
        path = target if os.path.isabs(target) else os.path.join(code_dir(env), target)
    elif target == _SCRIPT_MODULE:
        path = script_path(env)
    else:
        return None
    source = read(path)
    if source is None:
        return f"{variable}={spec!r}: there is no file {path}"
    return definition_problem(variable, spec, path, source, function.split(".")[0])


def definition_problem(variable: str, spec: str, path: str, source: str, name: str) -> str | None:
    """Why `source` does not define `name` at its top level, or None when it does."""
    try:
        tree = ast.parse(source, path)
    except SyntaxError as error:
        return f"{variable}={spec!r}: {path} line {error.lineno}: {error.msg}"
    defined = top_level_names(tree)
    if name in defined:
        return None
    listed = ", ".join(sorted(defined)) or "nothing"
    return f"{variable}={spec!r}: {path} defines no {name!r} (it defines {listed})"


def top_level_names(tree: ast.Module) -> set[str]:
    """The names a module defines at its top level: functions, classes, assignments, imports."""
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(t.id for t in targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.Import | ast.ImportFrom):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
    return names


def problems(env: Mapping[str, str], read: ReadSource | None) -> list[str]:
    """Every handler spec in `env` that cannot load."""
    found = (spec_problem(v, env.get(v, ""), env, read) for v in HANDLER_VARIABLES)
    return [problem for problem in found if problem]


def read_source(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8") as file:
            return file.read()
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
        return None
