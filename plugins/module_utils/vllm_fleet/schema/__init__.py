"""Validator for vLLM recipe trees (the public ``vllm-project/recipes`` schema).

A recipe tree is a directory holding ``models/<org>/<repo>.yaml`` recipes,
``strategies/*.yaml``, ``kv_store/*.yaml`` and ``taxonomy.yaml``.  Several trees
can be stacked: later roots override recipes (by ``<org>/<repo>``), strategies and
kv_store deployments (by ``name``) and taxonomy entries of earlier roots.  A root
may hold only some of these parts; cross references are checked against the
merged taxonomy and strategies of all roots.

Every file is checked and every problem is reported; nothing stops at the first.
Checks cover unknown keys, value types, fixed enums, references (hardware ids,
strategies, features, modes, variants, tasks, kv options) and YAML 1.1 / 1.2
reading differences (``yes``, ``0777``, ``1:30`` ...), which are warnings.

The key sets, types and value domains follow the path tables of the conformance
``SCHEMA.md`` (sections 2-5 and appendix A).  Values that are valid upstream but
unusual (``meta.hardware: supported``, ``difficulty: hard``, a feature-level
``hardware`` map, docker images such as ``docker pull vllm/...``, empty
``compatible_strategies``) are accepted.  Entries that upstream silently ignores
(an exact GPU id where only generations are looked up, a ``meta.hardware`` id
missing from the taxonomy, overrides that only one strategy reads) are warnings.

Only the standard library and PyYAML are used, so the module runs both inside
Ansible modules and from the command-line tool.

The package: ``spec`` (problems, vocabulary, the spec DSL, reference checks), ``recipe``
(the recipe schema and cross references), ``documents`` (strategies, kv_store, taxonomy),
``trees`` (files read with diagnostics, stacked trees). Which files make a tree and how
taxonomies stack is the loader's rule (``loader.tree_files``, ``loader.merge_taxonomy``).
"""

from __future__ import annotations

from ..loader import merge_taxonomy, tree_files
from .documents import validate_kv_store, validate_strategy, validate_taxonomy
from .recipe import validate_recipe
from .spec import DOCUMENT, ERROR, UNSAFE_ENV, WARNING, Problem, format_problems
from .trees import validate_trees

__all__ = [
    "Problem",
    "validate_trees",
    "validate_recipe",
    "validate_taxonomy",
    "validate_strategy",
    "validate_kv_store",
    "format_problems",
    "ERROR",
    "WARNING",
    "DOCUMENT",
    "UNSAFE_ENV",
    "merge_taxonomy",
    "tree_files",
]
