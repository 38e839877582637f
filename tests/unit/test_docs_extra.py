"""``make docs`` installs only the ``docs`` extra (``pip install -e '.[docs]'``) in a
fresh clone, and autodoc imports every module the pages document: each third-party
package those modules import when loaded must come with that extra (or the base
dependencies). CI builds the site in the ``dev`` environment, which has everything,
so only this test sees a module that fails to import in a ``docs``-only one."""

from __future__ import annotations

import ast
import importlib.util
import re
import sys
import tomllib
from importlib.machinery import ModuleSpec
from importlib.metadata import packages_distributions
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]
DIRECTIVE = re.compile(r"^\.\. auto(?:module|class|function|data|attribute):: ([\w.]+)", re.MULTILINE)


def installed_by(extra: str) -> set[str]:
    """The distributions ``pip install '.[extra]'`` asks for by name: the base
    dependencies, the extra's and those of chatledger's extras it names, recursively."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    names: set[str] = set()
    pending, seen = [*project["dependencies"], f"chatledger[{extra}]"], set()
    while pending:
        requirement = Requirement(pending.pop())
        if canonicalize_name(requirement.name) != "chatledger":
            names.add(canonicalize_name(requirement.name))
            continue
        for name in requirement.extras - seen:
            seen.add(name)
            pending.extend(project["optional-dependencies"][name])
    return names


def documented_modules() -> set[str]:
    """The chatledger modules autodoc imports: those its directives name (a class or
    function's own module), and the CLI's, which sphinx-argparse imports."""
    modules = {"chatledger.tools.cli"}
    for page in (ROOT / "docs").glob("*.md"):
        for target in DIRECTIVE.findall(page.read_text()):
            parts, inside = target.split("."), []
            while _spec(".".join(parts)) is None:
                inside.insert(0, parts.pop())
            found: object = importlib.import_module(".".join(parts))
            modules.add(".".join(parts))
            for name in inside:  # a package's lazy attribute lives in a module of its own
                found = getattr(found, name)
                modules.add(getattr(found, "__module__", None) or ".".join(parts))
    return modules


def loaded_imports(module: str) -> set[str]:
    """The top-level names ``module`` imports when loaded (its module body, ``try``
    blocks included, functions and ``if TYPE_CHECKING`` blocks not), following
    chatledger's own modules."""
    found: set[str] = set()
    pending, seen = [module], set()
    while pending:
        name = pending.pop()
        spec = _spec(name)
        if name in seen or spec is None or spec.origin is None:
            continue
        seen.add(name)
        tree = ast.parse(Path(spec.origin).read_text())
        for statement in _module_level(tree.body):
            if isinstance(statement, ast.Import):
                targets = [alias.name for alias in statement.names]
            elif isinstance(statement, ast.ImportFrom):
                base = statement.module or ""
                if statement.level:
                    relative = "." * statement.level + base
                    base = importlib.util.resolve_name(relative, _package(name, spec.origin))
                targets = [base, *(f"{base}.{alias.name}" for alias in statement.names)]
            else:
                continue
            for target in targets:
                if target.split(".")[0] == "chatledger":
                    pending.append(target)
                else:
                    found.add(target.split(".")[0])
    return found


def _spec(name: str) -> ModuleSpec | None:
    """The module ``name``'s spec; ``None`` for a name inside a module (a class, a function)."""
    try:
        return importlib.util.find_spec(name)
    except ModuleNotFoundError:
        return None


def _package(name: str, origin: str) -> str:
    return name if origin.endswith("__init__.py") else name.rpartition(".")[0]


def _module_level(body: list[ast.stmt]) -> list[ast.stmt]:
    """The statements a module's loading runs: its body's, those of its ``if`` blocks
    but not ``if TYPE_CHECKING``, and of its ``try`` blocks unless they handle a missing
    module (an optional import)."""
    statements: list[ast.stmt] = []
    for statement in body:
        if isinstance(statement, ast.Try):
            handled = " ".join(ast.unparse(handler.type) for handler in statement.handlers if handler.type)
            if "ImportError" not in handled and "ModuleNotFoundError" not in handled:
                statements.extend(_module_level(statement.body))
        elif isinstance(statement, ast.If) and "TYPE_CHECKING" not in ast.unparse(statement.test):
            statements.extend(_module_level(statement.body))
        elif not isinstance(statement, ast.If):
            statements.append(statement)
    return statements


def test_the_docs_extra_installs_what_the_documented_modules_import() -> None:
    available = installed_by("docs")
    distributions = packages_distributions()
    missing = {}
    for module in sorted(documented_modules()):
        for name in loaded_imports(module):
            if name in sys.stdlib_module_names or name == "__future__":
                continue
            provided = {canonicalize_name(dist) for dist in distributions.get(name, [name])}
            if not provided & available:
                missing[name] = module
    assert not missing, f"the docs extra lacks what these modules import: {missing}"
